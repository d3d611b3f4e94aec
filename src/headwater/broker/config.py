"""Broker settings, with Kafka's names in the comments where one exists."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from headwater.broker.security.listeners import Listener, SecurityProtocol, TlsSettings
from headwater.broker.security.sasl import ALL_MECHANISMS
from headwater.records.layout import MESSAGE_MAX_BYTES


@dataclass
class BrokerConfig:
    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 9092
    advertised_listener: str | None = None  # advertised.listeners: the HOST:PORT Metadata tells clients
    node_id: int = 0
    auto_create_topics: bool = True       # auto.create.topics.enable
    num_partitions: int = 1               # num.partitions, for auto-created topics
    # Each partition costs files and memory, and creating one ~1.5 ms of the event loop: bound them.
    # Kafka refuses more than 10,000 partitions in one CreateTopics (POLICY_VIOLATION); one broker, less.
    max_partitions_per_request: int = 1_000
    max_partitions: int = 10_000          # over all topics, auto-created ones included
    message_max_bytes: int = MESSAGE_MAX_BYTES      # message.max.bytes: the largest batch a produce may carry
    socket_request_max_bytes: int = 100 * 1024 * 1024  # socket.request.max.bytes: larger frames close the connection
    # "always": fsync before answering an acks=all produce; "never": leave it to the log's flush.messages/flush.ms
    flush: str = "always"
    topic_defaults: dict[str, str] = field(default_factory=dict)  # broker defaults of topic configs, Kafka names
    retention_check_interval_ms: int = 5 * 60 * 1000  # log.retention.check.interval.ms
    # log.flush.offset.checkpoint.interval.ms: how often a log's recovery-point file is written (a
    # crash recovers from it, so a longer interval means more to validate at restart, never less durability)
    flush_offset_checkpoint_interval_ms: int = 60_000
    cleaner_interval_ms: int = 15 * 1000               # log.cleaner.backoff.ms: pause between cleaner passes
    cleaner_io_max_bytes_per_second: float | None = None  # log.cleaner.io.max.bytes.per.second; None: unthrottled
    group_initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    fetch_session_cache_slots: int = 1000  # max.incremental.fetch.session.cache.slots (KIP-227)
    group_consumer_session_timeout_ms: int = 45000     # group.consumer.session.timeout.ms (KIP-848 groups)
    group_consumer_heartbeat_interval_ms: int = 5000   # group.consumer.heartbeat.interval.ms
    group_consumer_max_size: int | None = None         # group.consumer.max.size; None: no limit
    udp_listeners: list = field(default_factory=list)  # ingest.udp.UdpListenerConfig: StatsD / raw datagrams
    http_listener: tuple[str, int] | None = None  # where /metrics and the web console are served; None: nowhere
    http_tls: bool = False                        # serve them over HTTPS, with the broker's certificate (tls)
    console_allow_writes: bool = False            # may the console reset offsets
    listeners: list[Listener] = field(default_factory=list)  # listeners; none: PLAINTEXT on host:port
    tls: TlsSettings | None = None                # ssl.* settings of the SSL and SASL_SSL listeners
    sasl_mechanisms: tuple[str, ...] = ALL_MECHANISMS  # sasl.enabled.mechanisms
    super_users: frozenset[str] = frozenset()    # super.users: principals every ACL check lets through
    allow_everyone_if_no_acl_found: bool = False  # on secured listeners; PLAINTEXT ones always allow what no ACL names
    failed_authentication_delay_ms: int = 100     # connection.failed.authentication.delay.ms, doubled per failure

    def __post_init__(self):
        if not self.listeners:
            advertised = self.advertised if self.advertised_listener else None
            self.listeners = [Listener(SecurityProtocol.PLAINTEXT, self.host, self.port, advertised)]
        if self.tls is None and any(listener.protocol.tls for listener in self.listeners):
            raise ValueError("an SSL or SASL_SSL listener needs a certificate and key (--ssl-certfile, --ssl-keyfile)")
        if self.tls is None and self.http_tls:
            raise ValueError("an https:// --http-listener needs a certificate and key (--ssl-certfile, --ssl-keyfile)")

    @property
    def advertised(self) -> tuple[str, int]:
        if self.advertised_listener:
            host, port = self.advertised_listener.rsplit(":", 1)
            return host, int(port)
        return self.host, self.port
