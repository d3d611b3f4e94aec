"""`headwater topics ...` as a user runs it: a subprocess against a real broker."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.support.logview import produce_rounds


def headwater(*args, check=True):
    result = subprocess.run([sys.executable, "-m", "headwater", *args], capture_output=True, text=True, timeout=120)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def topics(broker, *args, check=True):
    return headwater("topics", *args, "--bootstrap-server", broker.bootstrap, check=check)


def topics_json(broker, *args):
    return json.loads(topics(broker, *args, "--json").stdout)


def test_create_describe_alter_list_delete(broker):
    out = topics(broker, "create", "customers", "--partitions", "2", "--config", "cleanup.policy=compact",
                 "--config", "retention.ms=60000").stdout
    assert "created topic customers" in out
    sent = produce_rounds(broker.bootstrap, "customers", [[(b"c-%d" % i, b"x" * 100) for i in range(30)]])

    described = topics_json(broker, "describe", "customers")
    assert described["configs"] == [{"config": "cleanup.policy", "value": "compact", "source": "topic"},
                                     {"config": "retention.ms", "value": "60000", "source": "topic"}]
    partitions = described["partitions"]
    assert [p["partition"] for p in partitions] == [0, 1]
    assert sum(p["records"] for p in partitions) == len(sent)
    assert all(p["log_start_offset"] == 0 and p["log_end_offset"] == p["records"] for p in partitions)
    assert all((p["bytes"] > 0) == (p["records"] > 0) for p in partitions)
    assert sum(p["bytes"] for p in partitions) > 30 * 100

    table = topics(broker, "describe", "customers").stdout  # the human form names the same things
    assert "cleanup.policy" in table and "compact" in table and "log_end_offset" in table

    topics(broker, "alter", "customers", "--config", "segment.bytes=1048576", "--delete-config", "retention.ms")
    resource = ConfigResource("topic", "customers")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    configs = admin.describe_configs([resource])[resource].result(30)
    assert (configs["segment.bytes"].value, configs["retention.ms"].value) == ("1048576", "604800000")
    described = topics_json(broker, "describe", "customers", "--all-configs")
    everything = {c["config"]: c["value"] for c in described["configs"]}
    assert everything["retention.ms"] == "604800000" and everything["cleanup.policy"] == "compact"

    assert {"topic": "customers", "partitions": 2} in topics_json(broker, "list")
    topics(broker, "delete", "customers")
    assert all(t["topic"] != "customers" for t in topics_json(broker, "list"))


BAD_INPUT = [
    (["create", "t", "--config", "retention.msec=5"], "unknown topic config 'retention.msec'"),
    (["create", "t", "--config", "cleanup.policy=shred"], "cleanup.policy"),
    (["describe", "absent"], "unknown topic 'absent'"),
    (["alter", "absent", "--config", "retention.ms=5"], "absent"),
    (["alter", "existing"], "nothing to alter"),
    (["alter", "existing", "--config", "retention.ms=soon"], "invalid value 'soon'"),
    (["delete", "absent"], "cannot delete topic 'absent'"),
]


def test_bad_input_is_one_line_and_changes_nothing(broker):
    topics(broker, "create", "existing", "--config", "retention.ms=5000")
    for args, message in BAD_INPUT:
        result = topics(broker, *args, check=False)
        assert result.returncode == 1, args
        assert result.stderr.startswith("headwater: error: ") and message in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # no traceback, no client log lines
    assert [t["topic"] for t in topics_json(broker, "list") if not t["topic"].startswith("__")] == ["existing"]
    assert topics_json(broker, "describe", "existing")["configs"] == [
        {"config": "retention.ms", "value": "5000", "source": "topic"}]


@pytest.mark.parametrize("args", [["create", "t", "--partitions", "0"], ["create", "t", "--config", "novalue"],
                                  ["frobnicate"]])
def test_bad_arguments_are_refused_by_the_parser(args):
    result = headwater("topics", *args, check=False)
    assert result.returncode == 2 and "error:" in result.stderr and "Traceback" not in result.stderr


def test_no_broker_is_a_clear_error():
    result = headwater("topics", "list", "--bootstrap-server", "127.0.0.1:1", check=False)
    assert result.returncode == 1
    assert result.stderr.startswith("headwater: error: cannot reach a broker at 127.0.0.1:1")
    assert "Traceback" not in result.stderr
