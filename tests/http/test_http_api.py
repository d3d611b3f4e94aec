"""The HTTP produce/read API (REST Proxy v3 shape) with a real HTTP client (urllib) and confluent-kafka."""
from __future__ import annotations

import base64
import http.client
import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from urllib.parse import urlsplit

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from starlette.routing import Match
from kafka.partitioner.default import murmur2

from headwater.http.console import Console
from headwater.testing import BrokerProcess

from tests.support.clients import confluent_consume, confluent_produce, sample_messages


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("http") / "data", "--num-partitions", "3",
                       "--http-listener", "127.0.0.1:0", "--message-max-bytes", "200000",
                       "--log-flush-offset-checkpoint-interval-ms", "0") as proc:
        clusters = call(proc.console_url + "v3/clusters")[1]
        yield proc, f"{proc.console_url}v3/clusters/{clusters['data'][0]['cluster_id']}"


def call(url: str, body=None, content_type="application/json", headers=None) -> tuple[int, dict, dict]:
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": content_type, **(headers or {})},
                                     method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read()), dict(answer.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), dict(error.headers)


def b64(data: bytes | None):
    return None if data is None else base64.b64encode(data).decode()


def test_batches_round_trip_byte_for_byte_both_ways(api):
    proc, base = api
    confluent_produce(proc.bootstrap, "events", sample_messages(1))  # the topic exists (HTTP does not create)
    messages = sample_messages(100)[1:]
    entries = [{"id": str(i), "key": None if k is None else {"type": "BINARY", "data": b64(k)},
                "value": None if v is None else {"type": "BINARY", "data": b64(v)},
                "headers": [{"name": n, "value": b64(hv)} for n, hv in h]} for i, (k, v, h) in enumerate(messages)]
    status, answer, _ = call(f"{base}/topics/events/records:batch", {"entries": entries})
    assert status == 200 and not answer["failures"] and len(answer["successes"]) == len(messages)
    placed = {(s["partition_id"], s["offset"]): messages[int(s["id"])] for s in answer["successes"]}
    got = confluent_consume(proc.bootstrap, "events", [0, 1, 2], 100)
    by_place = {(p, o): (k, v, h) for p, o, k, v, h in got}
    for place, (key, value, headers) in placed.items():
        assert by_place[place] == (key, value, headers)

    status, one, _ = call(f"{base}/topics/events/records", {"partition_id": 2, "key": {"type": "STRING", "data": "k"},
                                                            "value": {"type": "JSON", "data": {"a": [1, 2]}}})
    assert status == 200 and one["partition_id"] == 2
    for partition in (0, 1, 2):
        status, read, _ = call(f"{base}/topics/events/partitions/{partition}/records?offset=0&max_records=1000")
        assert status == 200
        native = sorted((o, k, v, h) for p, o, k, v, h in got if p == partition)
        over_http = [(r["offset"], r["key"] and base64.b64decode(r["key"]["data"]),
                      r["value"] and base64.b64decode(r["value"]["data"]),
                      [(x["name"], x["value"] and base64.b64decode(x["value"])) for x in r["headers"]])
                     for r in read["data"]]
        assert over_http[:len(native)] == native
    last = call(f"{base}/topics/events/partitions/2/records?offset={one['offset']}")[1]["data"][0]
    assert base64.b64decode(last["key"]["data"]) == b"k" and json.loads(base64.b64decode(last["value"]["data"])) == {
        "a": [1, 2]}
    listed = call(f"{base}/topics")[1]["data"]
    assert {"topic_name": "events", "partitions_count": 3} in listed


@pytest.mark.parametrize("path, body, content_type, status, words", [
    ("topics/events/records", b"{not json", "application/json", 400, "not JSON"),
    ("topics/nowhere/records", {"value": {"data": 1}}, "application/json", 404, "no topic"),
    ("topics/events/records", b"x" * 300_000, "application/json", 413, "exceeds"),
    ("topics/events/records", b"{}", "text/plain", 415, "application/json"),
    ("topics/events/records", {"value": {"type": "BINARY", "data": "%%"}}, "application/json", 400, "base64"),
    ("topics/events/records", {"partition_id": 9}, "application/json", 400, "partition_id"),
    ("topics/events/records:batch", {"entries": []}, "application/json", 400, "entries"),
])
def test_bad_requests_get_a_clear_4xx_and_the_broker_keeps_serving(api, path, body, content_type, status, words):
    proc, base = api
    confluent_produce(proc.bootstrap, "events", sample_messages(1))
    got, answer, _ = call(f"{base}/{path}", body, content_type)
    assert got == status and answer["error_code"] == status and words in answer["message"]
    assert call(f"{base}/topics/events/records", {"value": {"data": "ok"}})[0] == 200


def test_over_quota_answers_429_with_retry_after(api):
    proc, base = api
    confluent_produce(proc.bootstrap, "events", sample_messages(1))
    set_quota(proc, "slow", 1000)
    body = {"value": {"type": "STRING", "data": "x" * 600}}
    answers = [call(f"{base}/topics/events/records", body, headers={"Headwater-Client-Id": "slow"}) for _ in range(4)]
    assert answers[0][0] == 200  # within the first second's burst
    refused = [a for a in answers if a[0] == 429]
    assert refused and all(int(h["retry-after"]) >= 1 and "quota" in a["message"] for _, a, h in refused)
    assert call(f"{base}/topics/events/records", body)[0] == 200  # other clients are not held back


def set_quota(proc, client_id: str, rate: int) -> None:
    subprocess.run([sys.executable, "-m", "headwater", "quotas", "alter", "--client-id", client_id, "--add",
                    f"producer_byte_rate={rate}", "--bootstrap-server", proc.bootstrap], check=True)


def chunked_post(url: str, chunks: list[bytes], headers: dict) -> tuple[int, dict, dict]:
    """POST with Transfer-Encoding: chunked (no Content-Length), as a streaming client sends."""
    where = urlsplit(url)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=30)
    try:
        connection.request("POST", where.path, body=iter(chunks), encode_chunked=True,
                           headers={"Content-Type": "application/json", **headers})
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read()), dict(answer.headers)
    finally:
        connection.close()


def test_a_chunked_producer_is_charged_what_it_sends_as_with_content_length(api):
    """The quota is charged by the bytes read, not by a Content-Length header a chunked body lacks:
    one body five times the quota's one-second burst is throttled alike either way."""
    proc, base = api
    confluent_produce(proc.bootstrap, "events", sample_messages(1))
    for client in ("chunked", "sized"):
        set_quota(proc, client, 1000)
    body = json.dumps({"value": {"type": "STRING", "data": "x" * 5000}}).encode()
    url = f"{base}/topics/events/records"
    chunked = chunked_post(url, [body[i:i + 1000] for i in range(0, len(body), 1000)],
                           {"Headwater-Client-Id": "chunked"})
    sized = call(url, body, headers={"Headwater-Client-Id": "sized"})
    assert chunked[0] == sized[0] == 429
    assert chunked[2]["retry-after"] == sized[2]["retry-after"] == str(-(-(len(body) - 1000) // 1000))
    assert "quota" in chunked[1]["message"]


def test_an_oversize_chunked_body_is_refused_without_being_read_whole(api):
    """A chunked body past message.max.bytes is answered 413 as soon as the limit is passed: this
    client never finishes its body, so an answer at all shows the server stopped reading."""
    proc, base = api
    confluent_produce(proc.bootstrap, "events", sample_messages(1))
    where = urlsplit(f"{base}/topics/events/records")
    with socket.create_connection((where.hostname, where.port), timeout=30) as sock:
        sock.sendall(f"POST {where.path} HTTP/1.1\r\nHost: {where.netloc}\r\nContent-Type: application/json\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n".encode())
        chunk = b"x" * 10_000
        for _ in range(21):  # 210,000 bytes: past the 200,000 limit, and no last chunk
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        answer = sock.makefile("rb").read()  # up to the server's close: it ends the unfinished request
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413")
    assert "exceeds 200000 bytes" in json.loads(payload)["message"]
    assert call(f"{base}/topics/events/records", {"value": {"data": "ok"}})[0] == 200


def test_an_http_produce_is_answered_after_its_fsync(api):
    """REST Proxy's producer acks=all: with --flush always (the default) the answer comes after the
    group commit's fsync, which moves the partition's recovery point (its file written after each fsync
    with a checkpoint interval of 0)."""
    proc, base = api
    confluent_produce(proc.bootstrap, "durable-http", sample_messages(1))
    for _ in range(3):
        status, one, _ = call(f"{base}/topics/durable-http/records", {"partition_id": 1, "value": {"data": "x"}})
        assert status == 200
        recovery_point = int((proc.data_dir / "durable-http-1" / "recovery-point").read_text())
        assert recovery_point == one["offset"] + 1


def test_reads_show_what_a_read_committed_consumer_sees(api):
    """An aborted transaction's records are never read; an open one's not until it commits (the
    console's pages read through the same reader)."""
    from confluent_kafka import Producer
    proc, base = api
    producer = Producer({"bootstrap.servers": proc.bootstrap, "transactional.id": "http-read", "log_level": 0})
    producer.init_transactions(30)
    for value, end in ((b"aborted", producer.abort_transaction), (b"open", None)):
        producer.begin_transaction()
        producer.produce("txn-read", value, partition=0)
        producer.flush(30)
        if end is not None:
            end(30)
    assert call(f"{base}/topics/txn-read/records", {"partition_id": 0, "value": {"data": "plain"}})[0] == 200

    def values() -> list[bytes]:
        read = call(f"{base}/topics/txn-read/partitions/0/records?offset=0")[1]["data"]
        return [base64.b64decode(r["value"]["data"]) for r in read]
    assert values() == []       # the open transaction holds back what was written after it began
    producer.commit_transaction(30)
    assert values() == [b"open", b'"plain"']  # a JSON value is stored as its JSON text


def test_keyed_records_land_where_librdkafkas_murmur2_puts_them(api):
    proc, base = api
    keys = [f"user-{i}".encode() for i in range(40)] + ["ключ".encode(), b"\x00\xff" * 5, b""]
    native = confluent_produce(proc.bootstrap, "placed-native", [(k, b"v", []) for k in keys], partitioner="murmur2")
    confluent_produce(proc.bootstrap, "placed-http", sample_messages(1))  # created with as many partitions (3)
    entries = [{"id": str(i), "key": {"type": "BINARY", "data": b64(k)}, "value": {"type": "STRING", "data": "v"}}
               for i, k in enumerate(keys)]
    status, answer, _ = call(f"{base}/topics/placed-http/records:batch", {"entries": entries})
    assert status == 200 and len({p for p, *_ in native}) == 3
    assert [s["partition_id"] for s in sorted(answer["successes"], key=lambda s: int(s["id"]))] == [
        p for p, *_ in native]


def test_a_bad_entry_fails_alone_and_a_topics_rules_refuse_with_their_reason(api):
    proc, base = api
    confluent_produce(proc.bootstrap, "events", sample_messages(1))
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})  # kept: its futures end with it
    created = admin.create_topics([
        NewTopic("http-compacted", 1, config={"cleanup.policy": "compact"}),
        NewTopic("http-small", 1, config={"max.message.bytes": "1000"})])
    for future in created.values():
        future.result(30)
    entries = [{"id": "ok", "partition_id": 0, "value": {"type": "STRING", "data": "fine"}},
               {"id": "b64", "value": {"type": "BINARY", "data": "no base64!"}},
               {"id": "p", "partition_id": 7, "value": {"type": "STRING", "data": "x"}}]
    status, answer, _ = call(f"{base}/topics/events/records:batch", {"entries": entries})
    assert status == 207 and [s["id"] for s in answer["successes"]] == ["ok"]
    assert {f["id"]: (f["error_code"], "base64" in f["message"] or "partition_id" in f["message"])
            for f in answer["failures"]} == {"b64": (400, True), "p": (400, True)}
    for topic, entries, words in [
            ("http-compacted", [{"key": {"type": "STRING", "data": "k"}}, {"value": {"type": "STRING", "data": "v"}}],
             "without a key"),
            ("http-small", [{"value": {"type": "STRING", "data": "x" * 2000}}], "max.message.bytes")]:
        status, answer, _ = call(f"{base}/topics/{topic}/records:batch", {"entries": entries})
        assert status == 207 and not answer["successes"] and len(answer["failures"]) == len(entries)
        assert all(words in f["message"] for f in answer["failures"]), answer
    assert call(f"{base}/topics/http-compacted/records", {"key": {"type": "STRING", "data": "k"}})[0] == 200


def test_a_mixed_batch_is_answered_and_stored_as_computed_by_hand(api):
    """Every data type, headers, a keyless record and each kind of bad entry in one records:batch:
    the answer (field order included) and the records stored are what plain Python computes from
    the entries, with kafka-python's murmur2 placing the keys."""
    proc, base = api
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})  # kept: its futures end with it
    admin.create_topics([NewTopic("mixed-http", 3)])["mixed-http"].result(30)
    entries = [
        {"id": "bin", "key": {"type": "BINARY", "data": b64(b"\x00k1")}, "value": {"type": "BINARY", "data": b64(b"v")},
         "headers": [{"name": "h", "value": b64(b"x")}, {"name": "n", "value": None}]},
        {"id": "str", "key": {"type": "STRING", "data": "ключ"}, "value": {"type": "STRING", "data": "é"}},
        {"id": "json", "key": {"type": "JSON", "data": [1]}, "value": {"data": {"a": None}}},
        {"id": "keyless", "partition_id": 0, "value": None},
        {"id": "null-binary", "partition_id": 2, "key": {"type": "BINARY", "data": None}},
        "not an object",
        {"id": "kind", "value": {"type": "AVRO", "data": 1}},
        {"id": "unhashable-kind", "value": {"type": ["STRING"], "data": "x"}},
        {"id": "string", "value": {"type": "STRING", "data": 5}},
        {"id": "b64", "value": {"type": "BINARY", "data": "no base64!"}},
        {"id": "header", "headers": [{"value": b64(b"x")}]},
        {"id": "partition", "partition_id": 3},
        {"value": {"type": "STRING", "data": "no id"}, "partition_id": 1},
    ]
    many = {f"k{n}": f"key-{n}".encode() for n in range(8)}  # enough keys for them to be hashed as a vector
    for n, (name, key) in enumerate(many.items()):
        entries.insert(2 * n, {"id": name, "key": {"type": "STRING", "data": key.decode()}})
    status, answer, _ = call(f"{base}/topics/mixed-http/records:batch", {"entries": entries})
    stored = {"bin": (b"\x00k1", b"v", [("h", b"x"), ("n", None)]), "str": ("ключ".encode(), "é".encode(), []),
              "json": (b"[1]", b'{"a":null}', []), "keyless": (None, None, []), "null-binary": (None, None, []),
              None: (None, b"no id", []), **{name: (key, None, []) for name, key in many.items()}}
    placed = {"bin": _murmur2_partition(b"\x00k1"), "str": _murmur2_partition("ключ".encode()),
              "json": _murmur2_partition(b"[1]"), "keyless": 0, "null-binary": 2, None: 1,
              **{name: _murmur2_partition(key) for name, key in many.items()}}
    expected, next_offset = [], {0: 0, 1: 0, 2: 0}  # offsets in entry order within each partition
    for entry in entries:
        if isinstance(entry, dict) and entry.get("id") in placed:
            partition = placed[entry.get("id")]
            expected.append({**({"id": entry["id"]} if "id" in entry else {}), "cluster_id": base.rsplit("/", 1)[1],
                             "topic_name": "mixed-http", "partition_id": partition, "offset": next_offset[partition]})
            next_offset[partition] += 1
    timestamps = {s.pop("timestamp") for s in answer["successes"]}
    assert status == 207 and len(timestamps) == 1
    assert sorted(answer["successes"], key=_by_id) == sorted(expected, key=_by_id)
    assert [list(s) for s in sorted(answer["successes"], key=_by_id)] == [list(s) for s in sorted(expected, key=_by_id)]
    assert answer["failures"] == [
        {"error_code": 400, "message": "a record must be a JSON object"},
        {"id": "kind", "error_code": 400, "message": "value type 'AVRO' is not JSON, STRING or BINARY"},
        {"id": "unhashable-kind", "error_code": 400, "message": "value type ['STRING'] is not JSON, STRING or BINARY"},
        {"id": "string", "error_code": 400, "message": "value of type STRING needs a string"},
        {"id": "b64", "error_code": 400, "message": "value is not base64"},
        {"id": "header", "error_code": 400, "message": 'a header is {"name": string, "value": base64 or null}'},
        {"id": "partition", "error_code": 400, "message": "partition_id 3 is not one of 0..2"}]
    got = {(p, o): (k, v, h) for p, o, k, v, h in confluent_consume(proc.bootstrap, "mixed-http", [0, 1, 2], 14)}
    assert got == {(s["partition_id"], s["offset"]): stored[s.get("id")] for s in answer["successes"]}


def test_a_requests_keyless_records_share_one_partition_and_requests_take_turns(api):
    """As Kafka's sticky partitioner keeps a batch of keyless records on one partition: a
    records:batch's keyless records all go to one partition (one log to fsync before the answer),
    in entry order, and the next request's to the next partition; keyed records still go by murmur2."""
    proc, base = api
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})  # kept: its futures end with it
    admin.create_topics([NewTopic("sticky-http", 3)])["sticky-http"].result(30)
    keyless = [{"id": str(i), "value": {"type": "STRING", "data": f"v{i}"}} for i in range(10)]
    keyed = {"id": "keyed", "key": {"type": "STRING", "data": "user-1"}}
    taken = []
    for _ in range(3):
        status, answer, _ = call(f"{base}/topics/sticky-http/records:batch", {"entries": [*keyless[:5], keyed, *keyless[5:]]})
        placed = {s["id"]: (s["partition_id"], s["offset"]) for s in answer["successes"]}
        assert status == 200 and placed.pop("keyed")[0] == _murmur2_partition(b"user-1")
        partition = placed["0"][0]
        assert [placed[str(i)][0] for i in range(10)] == [partition] * 10
        offsets = [placed[str(i)][1] for i in range(10)]
        assert offsets == sorted(offsets) and len(set(offsets)) == 10   # in entry order
        taken.append(partition)
    assert sorted(taken) == [0, 1, 2]


def test_a_batch_over_the_topics_max_message_bytes_is_split_as_kafkas_producer_splits_it(api):
    """A request's keyless records are one batch; over the topic's max.message.bytes it is halved
    until each part fits, every record stored once, in entry order; one record alone over the limit
    still fails with the topic's reason."""
    proc, base = api
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})  # kept: its futures end with it
    admin.create_topics([NewTopic("split-http", 3, config={"max.message.bytes": "1000"})])["split-http"].result(30)
    entries = [{"id": str(i), "value": {"type": "STRING", "data": f"{i:03d}" * 50}} for i in range(10)]  # ~1.6 KB
    status, answer, _ = call(f"{base}/topics/split-http/records:batch",
                             {"entries": [*entries, {"id": "big", "value": {"type": "STRING", "data": "x" * 2000}}]})
    assert status == 207 and [f["id"] for f in answer["failures"]] == ["big"]
    assert "max.message.bytes" in answer["failures"][0]["message"]
    placed = {s["id"]: (s["partition_id"], s["offset"]) for s in answer["successes"]}
    assert sorted(placed) == sorted(e["id"] for e in entries) and len({p for p, _ in placed.values()}) == 1
    partition = placed["0"][0]
    offsets = [placed[str(i)][1] for i in range(10)]
    assert offsets == list(range(offsets[0], offsets[0] + 10))
    got = {o: v for p, o, _, v, _ in confluent_consume(proc.bootstrap, "split-http", [partition], 10)}
    assert [got[o] for o in offsets] == [(f"{i:03d}" * 50).encode() for i in range(10)]


def _by_id(success: dict) -> str:
    return success.get("id", "")


def _murmur2_partition(key: bytes, partitions: int = 3) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def test_a_records_batch_request_is_routed_before_any_console_page_is_tried():
    """Starlette tries routes in order: records:batch, the hot route, is the first one it tries."""
    scope = {"type": "http", "method": "POST", "path": "/v3/clusters/c/topics/t/records:batch", "root_path": ""}
    outer = Console(None, None, None, allow_writes=False).app().routes
    assert outer[0].matches(scope)[0] == Match.FULL
    inner = outer[0].app.routes
    assert inner[0].matches({**scope, "path": "/clusters/c/topics/t/records:batch"})[0] == Match.FULL
