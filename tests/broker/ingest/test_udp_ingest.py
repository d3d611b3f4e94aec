"""StatsD and raw UDP listeners of a real broker: real datagrams in, records out through confluent-kafka."""
from __future__ import annotations

import json
import random
import re
import socket
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from headwater.testing import BrokerProcess, wait_until

from tests.support.clients import confluent_consume, log_end_offsets


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ingest(tmp_path_factory):
    statsd, raw = _free_udp_port(), _free_udp_port()
    proc = BrokerProcess(tmp_path_factory.mktemp("udp") / "data", "--num-partitions", "3",
                         "--statsd-listener", f"127.0.0.1:{statsd}", "metrics",
                         "--udp-listener", f"127.0.0.1:{raw}", "datagrams", "--http-listener", "127.0.0.1:0").start()
    yield proc, statsd, raw
    if proc.proc.poll() is None:
        proc.stop()


def send(port: int, datagrams: list[bytes]) -> None:
    """Paced, so loopback's socket buffer never overflows: these tests count, they do not flood."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for i, datagram in enumerate(datagrams):
            s.sendto(datagram, ("127.0.0.1", port))
            if i % 50 == 49:
                time.sleep(0.02)


def test_statsd_metrics_of_every_type_become_json_records_keyed_by_name(ingest):
    proc, statsd, raw = ingest
    rng = random.Random(5)
    good = [b"pages.hits:1|c", b"pages.hits:5|c|@0.1", b"cpu:42.5|g", b"cpu:+3|g", b"cpu:-1.5|g",
            b"db.query:320|ms|@0.5", b"payload:1024|h", b"users:alice|s", b"lat:1:2:3|ms",
            b"jobs:2|c\nqueue:7|g\nwho:bob|s", b"req:1|c|#env:prod,canary"]
    expected = [  # what each metric must become, in plain Python
        {"name": "pages.hits", "type": "counter", "value": 1, "sample_rate": 1.0},
        {"name": "pages.hits", "type": "counter", "value": 5, "sample_rate": 0.1},
        {"name": "cpu", "type": "gauge", "value": 42.5, "sample_rate": 1.0, "delta": False},
        {"name": "cpu", "type": "gauge", "value": 3, "sample_rate": 1.0, "delta": True},
        {"name": "cpu", "type": "gauge", "value": -1.5, "sample_rate": 1.0, "delta": True},
        {"name": "db.query", "type": "timer", "value": 320, "sample_rate": 0.5},
        {"name": "payload", "type": "histogram", "value": 1024, "sample_rate": 1.0},
        {"name": "users", "type": "set", "value": "alice", "sample_rate": 1.0},
        *({"name": "lat", "type": "timer", "value": v, "sample_rate": 1.0} for v in (1, 2, 3)),
        {"name": "jobs", "type": "counter", "value": 2, "sample_rate": 1.0},
        {"name": "queue", "type": "gauge", "value": 7, "sample_rate": 1.0, "delta": False},
        {"name": "who", "type": "set", "value": "bob", "sample_rate": 1.0},
        {"name": "req", "type": "counter", "value": 1, "sample_rate": 1.0, "tags": {"env": "prod", "canary": None}},
    ]
    malformed = [rng.choice([b"nocolon", b"x:1|zz", b"x:abc|c", b"\xff\xfe\x00", b"x:1|c|@7", b":1|c", b"x:|s"])
                 for _ in range(600)]
    send(statsd, good + malformed + [b"mixed:1|c\ngarbage\nmixed:2|c"])
    expected += [{"name": "mixed", "type": "counter", "value": v, "sample_rate": 1.0} for v in (1, 2)]
    wait_until(lambda: log_end_offsets(proc.bootstrap, "metrics", [0, 1, 2]) >= len(expected), what="metrics")
    got = confluent_consume(proc.bootstrap, "metrics", [0, 1, 2], len(expected))
    assert all(key == json.loads(value)["name"].encode() for _, _, key, value, _ in got)
    canonical = lambda metric: json.dumps(metric, sort_keys=True)  # noqa: E731
    assert sorted(map(canonical, (json.loads(v) for *_, v, _ in got))) == sorted(map(canonical, expected))
    partitions_of = {}
    for partition, _, key, _, _ in got:
        assert partitions_of.setdefault(key, partition) == partition, "a metric stays in one partition"

    datagrams = [rng.randbytes(rng.randrange(1, 300)) for _ in range(200)]
    send(raw, datagrams)
    wait_until(lambda: log_end_offsets(proc.bootstrap, "datagrams", [0, 1, 2]) >= len(datagrams), what="datagrams")
    got_raw = confluent_consume(proc.bootstrap, "datagrams", [0, 1, 2], len(datagrams))
    assert sorted(v for *_, v, _ in got_raw) == sorted(datagrams)

    scraped = {(s.name, s.labels["mode"]): s.value for family in text_string_to_metric_families(
        urllib.request.urlopen(proc.console_url + "metrics", timeout=10).read().decode())
        for s in family.samples if s.name.startswith("headwater_udp_")}
    assert scraped == {("headwater_udp_received_total", "statsd"): len(good) + len(malformed) + 1,
                       ("headwater_udp_accepted_total", "statsd"): len(expected),
                       ("headwater_udp_rejected_total", "statsd"): len(malformed) + 1,
                       ("headwater_udp_received_total", "raw"): len(datagrams),
                       ("headwater_udp_accepted_total", "raw"): len(datagrams),
                       ("headwater_udp_rejected_total", "raw"): 0}
    assert proc.stop() == 0
    log = proc.log_file.read_text()
    counts = re.findall(r"statsd udp listener into metrics: received (\d+) datagrams, accepted (\d+), rejected (\d+)", log)
    assert counts[-1] == (str(len(good) + len(malformed) + 1), str(len(expected)), str(len(malformed) + 1))
    counts = re.findall(r"raw udp listener into datagrams: received (\d+) datagrams, accepted (\d+), rejected (\d+)", log)
    assert counts[-1] == (str(len(datagrams)), str(len(datagrams)), "0")
