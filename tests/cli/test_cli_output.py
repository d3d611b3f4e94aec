"""What every `headwater` command prints, run as a user runs it with stdout piped (not a terminal):
plain, whole, grep-able lines; and with --json one shape everywhere (snake_case keys, lists as
lists, a list of objects for rows, the same key for the same thing)."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from importlib.metadata import version

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from headwater.cli.main import build_parser
from headwater.demo.shopping_cart import Shop
from headwater.eventsourcing import NewEvent, open_store

SNAKE_CASE = re.compile(r"[a-z][a-z0-9_]*")
# names the commands used before for what now has one name each (log_end_offset, client_id, ...)
RETIRED_KEYS = {"log_end", "log_start", "committed", "client", "producer", "simple", "previous", "new"}
BOX_DRAWING = re.compile("[\u2500-\u257f]")
LONG_TOPIC = "t" * 40 + "-orders-" + "x" * 160               # 208 characters: no terminal is that wide
LONG_TXN_ID = "billing-" + "transactional-id-" * 10


def run(*args: str, broker=None) -> subprocess.CompletedProcess:
    at = ["--bootstrap-server", broker.bootstrap] if broker else []
    return subprocess.run([sys.executable, "-m", "headwater", *args, *at], capture_output=True, text=True, timeout=120)


def ok(*args: str, broker=None) -> str:
    result = run(*args, broker=broker)
    assert result.returncode == 0, (args, result.stderr)
    assert not BOX_DRAWING.search(result.stdout), result.stdout
    return result.stdout


def commands_with_json() -> set[str]:
    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, [*path, name])
        if any(action.dest == "json" for action in parser._actions):
            yield " ".join(path)
    return set(walk(build_parser([]), []))


def check_shape(value, where: str) -> None:
    """snake_case keys all the way down; rows are objects; no key a retired synonym."""
    if isinstance(value, dict):
        for key, item in value.items():
            assert SNAKE_CASE.fullmatch(key) and key not in RETIRED_KEYS, f"{where}: key {key!r}"
            check_shape(item, f"{where}.{key}")
    elif isinstance(value, list):
        kinds = {type(item) for item in value}
        assert len(kinds) <= 1, f"{where}: a list of mixed {kinds}"
        for item in value:
            check_shape(item, f"{where}[]")


@pytest.fixture
def cluster(start_broker, tmp_path):
    """A broker (with its HTTP listener: the schema registry) with a topic (the long name), a group's
    commits, a committed transaction and a share group's config; an event store with a projection;
    a data directory for --offline."""
    broker = start_broker("--num-partitions", "3", "--http-listener", "127.0.0.1:0")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": LONG_TXN_ID})
    producer.init_transactions(30)
    producer.begin_transaction()
    for partition in range(3):
        producer.produce(LONG_TOPIC, value=b"v", partition=partition)
    producer.commit_transaction(30)
    committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "readers", "enable.auto.commit": False})
    committer.commit(offsets=[TopicPartition(LONG_TOPIC, 0, 1)], asynchronous=False)
    committer.close()
    ok("topics", "create", "made-dlq", broker=broker)  # nothing to re-drive in it
    events = tmp_path / "events.db"
    store = open_store(str(events))
    Shop(store).day(carts=3, actions=20)
    store.append("long-1", [NewEvent("Noted", {"text": "y" * 300, "tags": ["a", "b"]})])
    store.close()
    ok("projections", "rebuild", "current_carts", "--app", "headwater.demo.shopping_cart", "--store", str(events))
    return broker, str(events), str(tmp_path / "offline")


def test_every_json_command_prints_one_shape(cluster):
    broker, events, offline = cluster
    store, data = ["--store", events], ["--offline", "--data-dir", offline]
    registry = ["--url", broker.console_url]
    schema = os.path.join(os.path.dirname(offline), "order.avsc")
    with open(schema, "w") as f:
        json.dump({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}, f)
    runs = {
        "topics create": (["topics", "create", "made", "--partitions", "2"], broker),
        "topics alter": (["topics", "alter", "made", "--config", "retention.ms=60000"], broker),
        "topics list": (["topics", "list"], broker),
        "topics describe": (["topics", "describe", LONG_TOPIC], broker),
        "topics delete": (["topics", "delete", "made"], broker),
        "groups list": (["groups", "list"], broker),
        "groups describe": (["groups", "describe", "readers"], broker),
        "groups reset-offsets": (["groups", "reset-offsets", "readers", "--topic", LONG_TOPIC, "--to-earliest"],
                                 broker),
        "groups alter": (["groups", "alter", "sharers", "--config", "share.delivery.count.limit=3"], broker),
        "groups redrive": (["groups", "redrive", "made-dlq"], broker),
        "groups delete": (["groups", "delete", "readers"], broker),
        "transactions list": (["transactions", "list"], broker),
        "transactions describe": (["transactions", "describe", LONG_TXN_ID], broker),
        "quotas alter": (["quotas", "alter", "--client-id", "c1", "--add", "producer_byte_rate=1048576"], broker),
        "quotas describe": (["quotas", "describe"], broker),
        "events read": (["events", "read", "long-1", *store], None),
        "events streams": (["events", "streams", *store], None),
        "projections status": (["projections", "status", *store], None),
        "projections skipped": (["projections", "skipped", "current_carts", *store], None),
        "pipelines list": (["pipelines", "list"], None),
        "users create": (["users", "create", "ada", "--password", "pw", "--iterations", "4096", *data], None),
        "users list": (["users", "list", *data], None),
        "users delete": (["users", "delete", "ada", *data], None),
        "acls add": (["acls", "add", "--principal", "User:ada", "--operation", "READ", "--topic", "t", *data], None),
        "acls list": (["acls", "list", *data], None),
        "acls remove": (["acls", "remove", "--principal", "User:ada", *data], None),
        "schemas register": (["schemas", "register", "orders-value", schema, *registry], None),
        "schemas list": (["schemas", "list", *registry], None),
        "schemas show": (["schemas", "show", "orders-value", *registry], None),
        "schemas check": (["schemas", "check", "orders-value", schema, *registry], None),
    }
    assert set(runs) == commands_with_json()
    printed = {}
    for name, (args, at) in runs.items():
        printed[name] = value = json.loads(ok(*args, "--json", broker=at))
        check_shape(value, name)
        assert isinstance(value, (list, dict)) and all(isinstance(row, dict) for row in
                                                       (value if isinstance(value, list) else [value])), name
    assert printed["quotas describe"] == [{"client_id": "c1", "producer_byte_rate": 1048576,
                                           "consumer_byte_rate": None, "request_percentage": None}]
    (described,) = printed["transactions describe"]
    assert described["transactional_id"] == LONG_TXN_ID and described["partitions"] == []
    assert printed["events read"][0]["data"] == {"text": "y" * 300, "tags": ["a", "b"]}
    assert isinstance(printed["projections status"][0]["checkpoint"], dict)
    assert [o["log_end_offset"] for o in printed["groups describe"]["offsets"]] == [2, 2, 2]  # a record, a marker
    assert {"group": "readers", "type": "simple", "state": "empty"} in printed["groups list"]


def test_piped_tables_are_whole_and_greppable(cluster):
    broker, events, _ = cluster
    listed = ok("transactions", "list", broker=broker)
    mine = [line.split("\t") for line in listed.splitlines() if "CompleteCommit" in line]
    assert [row[0] for row in mine] == [LONG_TXN_ID]
    assert listed.splitlines()[0].split("\t")[:4] == ["transactional_id", "producer_id", "producer_epoch", "state"]
    assert f"{LONG_TOPIC}\t3" in ok("topics", "list", broker=broker).splitlines()
    read = ok("events", "read", "long-1", "--store", events)
    assert json.dumps({"text": "y" * 300, "tags": ["a", "b"]}, separators=(",", ":")) in read
    described = ok("groups", "describe", "readers", broker=broker)
    assert "# offsets" in described.splitlines()
    assert [line.split("\t")[:3] for line in described.splitlines() if line.startswith(LONG_TOPIC)] == [
        [LONG_TOPIC, "0", "1"], [LONG_TOPIC, "1", "-"], [LONG_TOPIC, "2", "-"]]


def test_tty_compatible_asks_for_the_table_in_a_pipe():
    """rich's TTY_COMPATIBLE=1: a demo that captures a command's output shows its table."""
    shown = subprocess.run([sys.executable, "-m", "headwater", "pipelines", "list"], capture_output=True, text=True,
                           env={**os.environ, "TTY_COMPATIBLE": "1", "NO_COLOR": "1"}, timeout=60)
    assert shown.returncode == 0 and BOX_DRAWING.search(shown.stdout) and "\t" not in shown.stdout


def test_version():
    assert ok("--version") == f"headwater {version('headwater')}\n"
