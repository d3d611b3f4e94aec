"""UDP listeners in the broker process: datagrams become records through the broker's own append path.

UDP is direct messaging at its plainest: nothing acknowledges a datagram, so what arrives
while the broker is down, or overflows the socket buffer, is lost without a trace. What does
arrive is durable from here on. `statsd` mode writes one JSON record per metric, keyed by
metric name (so a metric stays in one partition, as Kafka's default partitioner would place
it); `raw` mode writes each datagram as one record's value.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import defaultdict
from dataclasses import dataclass

from headwater import records
from headwater.broker.broker import Broker
from headwater.broker.ingest.statsd import parse_datagram
from headwater.broker.partitioner import partition_for
from headwater.broker.stats import UdpStats
from headwater.protocol.errors import ErrorCode

log = logging.getLogger("headwater.broker.udp")


@dataclass(frozen=True)
class UdpListenerConfig:
    host: str
    port: int
    topic: str
    mode: str  # "statsd" or "raw"


class NoSuchTopic(Exception):
    """The listener's topic does not exist and the broker may not create it."""


class UdpListener(asyncio.DatagramProtocol):
    def __init__(self, broker: Broker, config: UdpListenerConfig):
        self.broker, self.topic, self.mode = broker, config.topic, config.mode
        self.stats = UdpStats(config.mode, config.topic)
        self._transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport) -> None:
        self._transport = transport

    @property
    def address(self) -> tuple[str, int]:
        return self._transport.get_extra_info("sockname")[:2]

    def close(self) -> None:
        self._transport.close()

    def log_stats(self) -> None:
        log.info("%s udp listener into %s: %s", self.mode, self.topic, self.stats.line())

    def datagram_received(self, data: bytes, addr) -> None:
        self.stats.received += 1
        now = int(time.time() * 1000)
        if self.mode == "raw":
            keyed = [(None, data)]
        else:
            metrics, malformed = parse_datagram(data)
            self.stats.rejected += malformed
            keyed = [(m.name.encode(), json.dumps(m.as_json()).encode()) for m in metrics]
        for partition, batch in self._batches(keyed, now).items():
            result = self.broker.appender.append(self.topic, partition, batch)
            count = records.read_header(batch).records_count
            if result.error == ErrorCode.NONE:
                self.stats.accepted += count
            else:
                self.stats.rejected += count
                log.warning("udp %s: %d record(s) refused: %s %s", self.topic, count, result.error.name,
                            result.message or "")

    def _batches(self, keyed: list[tuple[bytes | None, bytes]], now: int) -> dict[int, bytes]:
        """One batch per partition, keys placed as Kafka's default partitioner places them."""
        topic = self.broker.log_manager.topics.get(self.topic)  # None after a delete: the append recreates it
        partitions = len(topic.partitions) if topic is not None else 1
        grouped: dict[int, list[records.Record]] = defaultdict(list)
        for key, value in keyed:
            p = partition_for(key, partitions)
            grouped[p].append(records.Record(len(grouped[p]), now, key, value))
        return {p: records.encode_batch(rs) for p, rs in grouped.items()}

    def error_received(self, exc: Exception) -> None:
        log.warning("udp %s: %s", self.topic, exc)


STATS_INTERVAL = 60.0  # seconds between the listeners' counter log lines


async def start_udp_listeners(broker: Broker, configs: list[UdpListenerConfig]) -> list[UdpListener]:
    loop = asyncio.get_running_loop()
    started = []
    try:
        for cfg in configs:
            if broker.appender.topic_for_produce(cfg.topic) is None:
                raise NoSuchTopic(f"topic {cfg.topic!r} of the {cfg.mode} listener does not exist and auto-creation is off")
            listener = UdpListener(broker, cfg)
            await loop.create_datagram_endpoint(lambda: listener, local_addr=(cfg.host, cfg.port))
            log.info("%s udp listener on %s:%d into topic %s", cfg.mode, *listener.address, cfg.topic)
            started.append(listener)
            broker.stats.udp.append(listener.stats)
    except BaseException:
        close_udp_listeners(started)
        raise
    return started


async def log_udp_stats(listeners: list[UdpListener]) -> None:
    """Each listener's counters in the broker's log, every minute while it runs."""
    while True:
        await asyncio.sleep(STATS_INTERVAL)
        for listener in listeners:
            listener.log_stats()


def close_udp_listeners(listeners: list[UdpListener]) -> None:
    for listener in listeners:
        listener.close()
        listener.log_stats()
