"""Direct-messaging ingest: datagrams written into the broker's logs without a Kafka client.

`statsd` parses the StatsD line protocol, `udp` is the listener appending through the broker.
"""
