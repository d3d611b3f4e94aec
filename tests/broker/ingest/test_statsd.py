"""The StatsD line protocol, line by line."""
import pytest

from headwater.broker.ingest.statsd import MalformedLine, Metric, parse_datagram, parse_line


@pytest.mark.parametrize("line, expected", [
    ("hits:1|c", [Metric("hits", "counter", 1)]),
    ("hits:3|c|@0.1", [Metric("hits", "counter", 3, 0.1)]),
    ("temp:21.5|g", [Metric("temp", "gauge", 21.5)]),
    ("temp:+4|g", [Metric("temp", "gauge", 4, delta=True)]),
    ("temp:-2.5|g", [Metric("temp", "gauge", -2.5, delta=True)]),
    ("db.query:320|ms|@0.5", [Metric("db.query", "timer", 320, 0.5)]),
    ("size:1024|h", [Metric("size", "histogram", 1024)]),
    ("users:alice|s", [Metric("users", "set", "alice")]),
    ("lat:1:2:3|ms", [Metric("lat", "timer", v) for v in (1, 2, 3)]),
    ("req:1|c|#env:prod,canary", [Metric("req", "counter", 1, tags=(("env", "prod"), ("canary", None)))]),
])
def test_each_metric_type(line, expected):
    assert parse_line(line) == expected


@pytest.mark.parametrize("line", ["hits", "hits:1", "hits:1|x", ":1|c", "hits:abc|c", "hits:1|c|@2", "hits:1|c|@0",
                                  "hits:nan|g", "hits:1|c|bogus", "users:|s", "hits:1|c|@x"])
def test_malformed_lines_are_refused(line):
    with pytest.raises(MalformedLine):
        parse_line(line)


def test_a_datagram_of_many_lines_skips_the_bad_ones():
    metrics, malformed = parse_datagram(b"a:1|c\nbroken\n\nb:2|g\n\xff\xfe:1|c\nc:x|ms\n")
    assert [m.name for m in metrics] == ["a", "b"]
    assert malformed == 3


def test_json_shape():
    assert Metric("temp", "gauge", -2, delta=True).as_json() == {
        "name": "temp", "type": "gauge", "value": -2, "sample_rate": 1.0, "delta": True}
    assert Metric("u", "set", "x", tags=(("a", "b"),)).as_json() == {
        "name": "u", "type": "set", "value": "x", "sample_rate": 1.0, "tags": {"a": "b"}}
