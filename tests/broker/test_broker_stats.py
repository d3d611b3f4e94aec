"""The core's counters, read by the Prometheus collector at scrape time, give the samples
prometheus_client's own Counter and Histogram would have given for the same events."""
import random

from prometheus_client import CollectorRegistry, Counter, Histogram

from headwater.http.metrics import StatsCollector
from headwater.broker.stats import LATENCY_BUCKETS, BrokerStats
from headwater.protocol.messages import ApiKey


def samples(collector) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in collector.collect() for s in family.samples if not s.name.endswith("_created")}


def test_scraped_stats_equal_prometheus_clients_own_metrics():
    rng = random.Random(7)
    stats, registry = BrokerStats(), CollectorRegistry()
    latency = Histogram("kafka_network_requestmetrics_request_seconds", "", ["request"],
                        buckets=LATENCY_BUCKETS, registry=registry)
    messages = Counter("kafka_server_brokertopicmetrics_messagesin", "", ["topic"], registry=registry)
    bytes_in = Counter("kafka_server_brokertopicmetrics_bytesin", "", ["topic"], registry=registry)
    bytes_out = Counter("kafka_server_brokertopicmetrics_bytesout", "", ["topic"], registry=registry)
    retention = Counter("kafka_log_retention_segments_deleted", "", registry=registry)
    for _ in range(500):
        # every bound itself too: a bucket holds the times equal to its bound
        seconds = rng.choice([rng.uniform(0, 12), rng.choice(LATENCY_BUCKETS)])
        api = rng.choice([ApiKey.PRODUCE, ApiKey.FETCH])
        stats.request(api, seconds)
        latency.labels("Produce" if api == ApiKey.PRODUCE else "Fetch").observe(seconds)
        topic, size = rng.choice("ab"), rng.randrange(1, 1000)
        stats.appended(topic, 3, size)
        stats.fetched(topic, size // 2)
        for counter, value in ((messages, 3), (bytes_in, size), (bytes_out, size // 2)):
            counter.labels(topic).inc(value)
        stats.retention_deleted(1)
        retention.inc(1)
    expected = samples(registry)
    scraped = samples(StatsCollector(stats))
    assert {k: v for k, v in scraped.items() if k in expected} == expected
    # the cleaner's counters are there, at zero
    assert scraped[("kafka_log_logcleaner_logs_cleaned_total", ())] == 0
