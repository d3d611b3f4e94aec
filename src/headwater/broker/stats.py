"""The broker's counters: what the core counts as it works, always there whether or not
anything reads them. Updated once per request or per batch, never per record, with plain
integer adds; the Prometheus collector (http.metrics) reads them at scrape time."""
from __future__ import annotations

import time
from bisect import bisect_left
from dataclasses import dataclass, field

from headwater.log import CleanerStats

# Request latencies from 100 us (a produce to the page cache) to 10 s (a long-polling fetch).
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


@dataclass
class TopicStats:
    messages_in: int = 0  # records appended
    bytes_in: int = 0     # record batch bytes appended
    bytes_out: int = 0    # record batch bytes fetched
    created: float = field(default_factory=time.time)


@dataclass
class RequestLatency:
    """One API's request times: how many fell in each of LATENCY_BUCKETS (and past the last), and their sum."""
    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    seconds: float = 0.0
    created: float = field(default_factory=time.time)


@dataclass
class UdpStats:
    """One UDP listener's counters."""
    mode: str             # "statsd" or "raw"
    topic: str
    received: int = 0     # datagrams
    accepted: int = 0     # records appended (metrics in statsd mode, datagrams in raw mode)
    rejected: int = 0     # malformed lines skipped, or records the log refused

    def line(self) -> str:
        return f"received {self.received} datagrams, accepted {self.accepted}, rejected {self.rejected}"


class BrokerStats:
    def __init__(self) -> None:
        self.created = time.time()
        self.topics: dict[str, TopicStats] = {}
        self.requests: dict[int, RequestLatency] = {}   # by API key
        self.retention_segments_deleted = 0
        self.cleaner = CleanerStats()                   # the log cleaner's passes, added up
        self.udp: list[UdpStats] = []                   # the UDP listeners running

    def _topic(self, topic: str) -> TopicStats:
        stats = self.topics.get(topic)
        if stats is None:
            stats = self.topics[topic] = TopicStats()
        return stats

    def appended(self, topic: str, records: int, size: int) -> None:
        stats = self._topic(topic)
        stats.messages_in += records
        stats.bytes_in += size

    def fetched(self, topic: str, size: int) -> None:
        if size:
            self._topic(topic).bytes_out += size

    def request(self, api_key: int, seconds: float) -> None:
        latency = self.requests.get(api_key)
        if latency is None:
            latency = self.requests[api_key] = RequestLatency()
        latency.counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1   # a bucket holds times <= its bound
        latency.seconds += seconds

    def retention_deleted(self, segments: int) -> None:
        self.retention_segments_deleted += segments

    def cleaned(self, stats: CleanerStats) -> None:
        self.cleaner.add(stats)

    def forget_topic(self, topic: str) -> None:
        self.topics.pop(topic, None)
