"""Prometheus metrics of one broker, under the names dashboards already use, all read at scrape time:

* counters and histograms from the core's ``BrokerStats`` (``StatsCollector``): messages and
  bytes in and out per topic in the JMX exporter's style (``kafka_server_brokertopicmetrics_*``),
  requests per API with their latency, the log cleaner's and retention's work, the UDP listeners;
* gauges computed from the broker's state (``StateCollector``), with kafka_exporter's names for
  topics and consumer groups, the same shape for share groups (``kafka_sharegroup_*``, with
  KIP-932's ``share-group-count`` per state), plus log size per partition and open connections.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from headwater.broker.fetch_sessions import FetchSessionCache
from headwater.http.state import (PartitionOffsets, SharePartitionView, consumer_groups, group_offsets,
                                         share_partitions)
from headwater.http.transactions import TransactionCollector
from headwater.broker.stats import LATENCY_BUCKETS, BrokerStats
from headwater.protocol.messages import ApiKey

_CLEANER_COUNTERS = ("segments_rewritten", "records_removed", "bytes_read", "bytes_written")
_LE = [floatToGoString(bound) for bound in (*LATENCY_BUCKETS, float("inf"))]


class BrokerMetrics:
    """The broker's metrics, in a registry of its own (one per broker, so tests may run many)."""

    def __init__(self, broker, connections: Callable[[], int]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(StatsCollector(broker.stats))
        self.registry.register(StateCollector(broker, connections))
        self.registry.register(TransactionCollector(broker))
        self.registry.register(FetchSessionCollector(broker.fetch_sessions))
        self.registry.register(UdpCollector(broker.stats))


class StatsCollector(Collector):
    """The core's counters (``BrokerStats``), with the creation times prometheus_client's own counters show."""

    def __init__(self, stats: BrokerStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        stats, prefix = self._stats, "kafka_server_brokertopicmetrics_"
        topics = list(stats.topics.items())
        for name, field, what in (("messagesin", "messages_in", "Records appended"),
                                  ("bytesin", "bytes_in", "Record batch bytes appended"),
                                  ("bytesout", "bytes_out", "Record batch bytes fetched")):
            family = CounterMetricFamily(prefix + name, what, labels=["topic"])
            for topic, counts in topics:
                family.add_metric([topic], getattr(counts, field), created=counts.created)
            yield family
        requests = HistogramMetricFamily("kafka_network_requestmetrics_request_seconds",
                                         "Time from a request read to its response written, per API",
                                         labels=["request"])
        for api_key, latency in list(stats.requests.items()):
            api = _api_name(ApiKey(api_key))
            cumulative, total = [], 0
            for le, count in zip(_LE, latency.counts):
                total += count
                cumulative.append((le, total))
            requests.add_metric([api], cumulative, latency.seconds)
            requests.add_sample(requests.name + "_created", {"request": api}, latency.created)
        yield requests
        yield CounterMetricFamily("kafka_log_retention_segments_deleted", "Segments deleted by retention",
                                  value=stats.retention_segments_deleted, created=stats.created)
        yield CounterMetricFamily("kafka_log_logcleaner_logs_cleaned", "Logs compacted by the cleaner",
                                  value=stats.cleaner.logs_cleaned, created=stats.created)
        for name in _CLEANER_COUNTERS:
            yield CounterMetricFamily(f"kafka_log_logcleaner_{name}", f"Log cleaner: {name.replace('_', ' ')}",
                                      value=getattr(stats.cleaner, name), created=stats.created)


class UdpCollector(Collector):
    """Datagrams received and records accepted or rejected by each UDP listener (StatsD, raw)."""

    def __init__(self, stats: BrokerStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[CounterMetricFamily]:
        for field, what in (("received", "Datagrams received"), ("accepted", "Records appended"),
                            ("rejected", "Malformed lines skipped or records refused")):
            family = CounterMetricFamily(f"headwater_udp_{field}", f"UDP listeners: {what}", labels=["mode", "topic"])
            for listener in self._stats.udp:
                family.add_metric([listener.mode, listener.topic], getattr(listener, field))
            yield family


class FetchSessionCollector(Collector):
    """The fetch-session cache (KIP-227): Kafka's FetchSessionCache gauges, and how fetches used it."""

    def __init__(self, cache: FetchSessionCache) -> None:
        self._cache = cache

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        cache, stats, prefix = self._cache, self._cache.stats, "kafka_server_fetchsessioncache_"
        yield GaugeMetricFamily(prefix + "numincrementalfetchsessions", "Fetch sessions cached", value=len(cache))
        yield GaugeMetricFamily(prefix + "numincrementalfetchpartitionscached", "Partitions in cached fetch sessions",
                                value=cache.partitions_cached)
        yield CounterMetricFamily(prefix + "incrementalfetchsessionevictions",
                                  "Fetch sessions evicted to make room for larger ones", value=stats.evictions)
        requests = CounterMetricFamily("headwater_fetch_requests", "Fetch requests, full or within a session",
                                       labels=["kind"])
        for kind in ("full", "incremental"):
            requests.add_metric([kind], stats.fetches[kind])
        yield requests
        yield CounterMetricFamily("headwater_fetch_incremental_partitions_answered",
                                  "Partitions carried by responses to incremental fetches",
                                  value=stats.partitions_answered_incrementally)
        errors = CounterMetricFamily("headwater_fetch_session_errors", "Fetches refused for their session",
                                     labels=["error"])
        for error, count in stats.errors.items():
            errors.add_metric([error], count)
        yield errors


def _api_name(key: ApiKey) -> str:
    """Kafka's request names as the JMX exporter labels them: Produce, OffsetCommit, ..."""
    return "".join(word.capitalize() for word in key.name.split("_"))


class StateCollector(Collector):
    """Gauges read from the broker at scrape time (kafka_exporter's names and labels)."""

    def __init__(self, broker, connections: Callable[[], int]) -> None:
        self.broker, self.connections = broker, connections

    def collect(self) -> Iterator[GaugeMetricFamily]:
        broker = self.broker
        yield GaugeMetricFamily("kafka_brokers", "Number of brokers in the cluster", value=1)
        partitions = GaugeMetricFamily("kafka_topic_partitions", "Partitions of a topic", labels=["topic"])
        current = GaugeMetricFamily("kafka_topic_partition_current_offset", "Log end offset of a partition",
                                    labels=["topic", "partition"])
        oldest = GaugeMetricFamily("kafka_topic_partition_oldest_offset", "Log start offset of a partition",
                                   labels=["topic", "partition"])
        size = GaugeMetricFamily("kafka_log_log_size", "Bytes of a partition's log on disk",
                                 labels=["topic", "partition"])
        for topic in list(broker.log_manager.topics.values()):
            partitions.add_metric([topic.name], len(topic.partitions))
            for index, plog in enumerate(topic.partitions):
                labels = [topic.name, str(index)]
                current.add_metric(labels, plog.log_end_offset)
                oldest.add_metric(labels, plog.log_start_offset)
                size.add_metric(labels, plog.size_bytes)
        yield from (partitions, current, oldest, size)
        yield from self._groups()
        yield from self._share_groups()
        yield GaugeMetricFamily("kafka_server_socketservermetrics_connection_count", "Open Kafka client connections",
                                value=self.connections())
        yield GaugeMetricFamily("kafka_log_logcleaner_uncleanable_partitions_count",
                                "Logs the cleaner has set aside", value=len(broker.log_manager.cleaner.uncleanable))

    def _groups(self) -> Iterator[GaugeMetricFamily]:
        members = GaugeMetricFamily("kafka_consumergroup_members", "Members of a consumer group",
                                    labels=["consumergroup"])
        committed = GaugeMetricFamily("kafka_consumergroup_current_offset", "Committed offset of a group",
                                      labels=["consumergroup", "topic", "partition"])
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "Log end offset minus committed offset (log start offset if none)",
                                labels=["consumergroup", "topic", "partition"])
        lag_sum = GaugeMetricFamily("kafka_consumergroup_lag_sum", "Lag of a group over a topic's partitions",
                                    labels=["consumergroup", "topic"])
        for group in consumer_groups(self.broker):   # both protocols: classic and KIP-848's consumer
            gid = group.group_id
            members.add_metric([gid], len(group.members))
            rows = group_offsets(self.broker, gid)
            for row in rows:
                labels = [gid, row.topic, str(row.partition)]
                if row.committed is not None:
                    committed.add_metric(labels, row.committed)
                lag.add_metric(labels, row.lag)
            _add_lag_sums(lag_sum, gid, rows)
        yield from (members, committed, lag, lag_sum)

    def _share_groups(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        share = self.broker.share.groups
        by_state = GaugeMetricFamily("kafka_server_group_coordinator_metrics_share_group_count",
                                     "Share groups in each state (KIP-932 share-group-count)", labels=["state"])
        for state in ("Empty", "Stable"):
            by_state.add_metric([state], sum(1 for g in share.values() if g.state == state))
        members = GaugeMetricFamily("kafka_sharegroup_members", "Members of a share group", labels=["sharegroup"])
        partition = ["sharegroup", "topic", "partition"]
        start = GaugeMetricFamily("kafka_sharegroup_start_offset", "Share-partition start offset (SPSO)",
                                  labels=partition)
        lag = GaugeMetricFamily("kafka_sharegroup_lag", "Log end offset minus share-partition start offset",
                                labels=partition)
        lag_sum = GaugeMetricFamily("kafka_sharegroup_lag_sum", "Lag of a share group over a topic's partitions",
                                    labels=["sharegroup", "topic"])
        in_flight = GaugeMetricFamily("kafka_sharegroup_records_in_flight",
                                      "Records acquired by a member and not yet acknowledged", labels=partition)
        available = GaugeMetricFamily("kafka_sharegroup_records_available",
                                      "Records waiting for a member, up to the log end", labels=partition)
        archived = CounterMetricFamily("kafka_sharegroup_records_archived",
                                       "Records given up on (rejected or out of delivery attempts)", labels=partition)
        dead_lettered = CounterMetricFamily("kafka_sharegroup_records_dead_lettered",
                                            "Archived records written to the dead-letter topic", labels=partition)
        per_partition = {"start": start, "lag": lag, "in_flight": in_flight, "available": available,
                         "archived": archived, "dead_lettered": dead_lettered}   # SharePartitionView field -> family
        for group_id, group in list(share.items()):
            members.add_metric([group_id], len(group.members))
            rows = share_partitions(self.broker, group_id)
            for row in rows:
                for field, family in per_partition.items():
                    family.add_metric([group_id, row.topic, str(row.partition)], getattr(row, field))
            _add_lag_sums(lag_sum, group_id, rows)
        yield from (by_state, members, start, lag, lag_sum, in_flight, available, archived, dead_lettered)


def _add_lag_sums(family: GaugeMetricFamily, group_id: str,
                  rows: list[PartitionOffsets] | list[SharePartitionView]) -> None:
    """One sample per topic: the lag of the group's rows summed over the topic's partitions."""
    sums: dict[str, int] = {}
    for row in rows:
        sums[row.topic] = sums.get(row.topic, 0) + row.lag
    for topic, total in sums.items():
        family.add_metric([group_id, topic], total)
