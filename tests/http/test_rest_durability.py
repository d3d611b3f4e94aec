"""REST Proxy's acks=all, step by step in-process: a records:batch request that wrote four
partitions is answered only after the fsync of every one of them, even when three are on disk
and the fourth's fsync is held (the round's fsyncs run at once on the group commit's threads);
a failed fsync fails that partition's records only."""
import asyncio
import base64
import json
import threading

from headwater.broker.broker import Broker
from headwater.broker.config import BrokerConfig
from headwater.http.rest import RestApi
from headwater.log import Log

PARTITIONS, HELD = 4, 2
ENTRIES = [{"id": str(i), "partition_id": i % PARTITIONS, "key": {"type": "STRING", "data": f"k{i}"},
            "value": {"type": "BINARY", "data": base64.b64encode(b"v%d" % i).decode()}} for i in range(10)]
BODY = json.dumps({"entries": ENTRIES}).encode()
# Ground truth in plain Python: entry i goes to partition i % 4, at the count of earlier entries there.
EXPECTED = [(str(i), i % PARTITIONS, sum(1 for j in range(i) if j % PARTITIONS == i % PARTITIONS)) for i in range(10)]


async def post(app, path: str, body: bytes, sent: list[dict]) -> None:
    """One HTTP request through the ASGI app; what it sends is appended to ``sent`` as it goes."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2)}
    requests = iter([{"type": "http.request", "body": body, "more_body": False}])

    async def receive() -> dict:
        return next(requests, {"type": "http.disconnect"})

    async def send(message: dict) -> None:
        sent.append(message)
    await app(scope, receive, send)


def test_a_batch_over_four_partitions_is_answered_after_the_last_fsync(tmp_path, monkeypatch):
    synced, held, release = [], threading.Event(), threading.Event()
    real_flush = Log.flush

    def flush(plog: Log) -> None:   # the group commit's fsync of one log; partition HELD's waits
        if plog.directory.name == f"orders-{HELD}":
            held.set()
            assert release.wait(30)
        real_flush(plog)
        synced.append(plog.directory.name)

    monkeypatch.setattr(Log, "flush", flush)   # before the broker makes its group commit
    broker = Broker(BrokerConfig(data_dir=tmp_path / "data", flush="always"))
    try:
        topic = broker.log_manager.create_topic("orders", PARTITIONS, {})
        app = RestApi(broker).app()
        path = f"/clusters/{broker.cluster_id}/topics/orders/records:batch"

        async def scenario() -> list[dict]:
            sent: list[dict] = []
            answering = asyncio.ensure_future(post(app, path, BODY, sent))
            for _ in range(3000):   # until the other three are on disk and HELD's fsync waits
                if held.is_set() and len([n for n in synced if n.startswith("orders")]) == PARTITIONS - 1:
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("the round's other fsyncs did not complete")
            await asyncio.sleep(0.05)
            assert sent == []   # three partitions durable, one not: nothing of the answer yet
            assert topic.partitions[HELD].recovery_point == 0
            release.set()
            await answering
            # Once answered, every partition written is durable up to what the answer names.
            assert [topic.partitions[p].recovery_point for p in range(PARTITIONS)] == [3, 3, 2, 2]
            return sent

        sent = asyncio.run(scenario())
    finally:
        release.set()
        broker.close()
    assert sent[0]["status"] == 200
    answer = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
    assert [(s["id"], s["partition_id"], s["offset"]) for s in answer["successes"]] == EXPECTED
    assert answer["failures"] == []


def test_a_failed_fsync_fails_that_partitions_records_only(tmp_path, monkeypatch):
    real_flush = Log.flush

    def flush(plog: Log) -> None:
        if plog.directory.name == f"orders-{HELD}":
            raise OSError(5, "Input/output error")
        real_flush(plog)

    monkeypatch.setattr(Log, "flush", flush)
    broker = Broker(BrokerConfig(data_dir=tmp_path / "data", flush="always"))
    try:
        broker.log_manager.create_topic("orders", PARTITIONS, {})
        sent: list[dict] = []
        asyncio.run(post(RestApi(broker).app(), f"/clusters/{broker.cluster_id}/topics/orders/records:batch",
                         BODY, sent))
        held_directory = broker.log_manager.topics["orders"].partitions[HELD].directory
    finally:
        broker.close()
    assert sent[0]["status"] == 207
    answer = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
    assert [(s["id"], s["partition_id"], s["offset"]) for s in answer["successes"]] == [
        e for e in EXPECTED if e[1] != HELD]
    assert answer["failures"] == [
        {"id": i, "error_code": 500, "message": f"cannot fsync {held_directory}: [Errno 5] Input/output error"}
        for i, partition, _ in EXPECTED if partition == HELD]
