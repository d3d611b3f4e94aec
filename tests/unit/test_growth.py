"""Growth signals: a waiting fetch is woken by an append, and nothing is kept for partitions
no fetch is watching (finding 7 of issue 10: a Fetch naming unknown partitions leaked one
future each, forever)."""
import asyncio

from kafka.protocol.consumer import FetchRequest

from headwater.broker.broker import Broker
from headwater.broker.config import BrokerConfig
from headwater.broker.apis.fetch import fetch
from headwater.broker.growth import GrowthSignals
from headwater.protocol.messages import RequestHeader
from headwater.records import Record, encode_batch

F = FetchRequest[11]


def fetch_request(partitions: list[tuple[str, int]], max_wait_ms: int = 0):
    topics = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(F.FetchTopic.FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
            partition_max_bytes=1 << 20))
    return F(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
             session_epoch=-1, topics=[F.FetchTopic(topic=t, partitions=p) for t, p in topics.items()],
             forgotten_topics_data=[], rack_id="")


def test_watch_drops_the_future_when_its_last_watcher_leaves():
    async def scenario():
        signals = GrowthSignals()
        with signals.watch([("t", 0), ("t", 0), ("t", 1)]) as futures:
            with signals.watch([("t", 0)]) as inner:
                assert inner[0] is futures[0] is futures[1]
            assert len(signals) == 2
            signals.notify("t", 0)
            assert futures[0].done() and not futures[2].done()
        assert len(signals) == 0
    asyncio.run(scenario())


def test_fetch_of_unknown_partitions_leaves_no_signal(tmp_path):
    async def scenario():
        broker = Broker(BrokerConfig(data_dir=tmp_path))
        try:
            broker.log_manager.create_topic("real", 2)
            header = RequestHeader(1, 11, 1, "test")
            unknown = [(f"ghost-{i}", i % 7) for i in range(20_000)] + [("real", p) for p in range(5, 2_005)]
            for start in range(0, len(unknown), 5_000):
                response = await fetch(broker, header, fetch_request(unknown[start:start + 5_000]))
                assert {p.error_code for t in response.responses for p in t.partitions} == {3}  # UNKNOWN_TOPIC_OR_PARTITION
            assert len(broker.growth) == 0

            # A fetch waiting on a real partition holds one signal while it waits and none after.
            waiting = asyncio.create_task(fetch(broker, header, fetch_request([("real", 0)], max_wait_ms=30_000)))
            while not len(broker.growth):
                await asyncio.sleep(0.01)
            assert len(broker.growth) == 1
            assert broker.append("real", 0, encode_batch([Record(0, 1, b"k", b"v")])).error == 0
            response = await asyncio.wait_for(waiting, 30)
            assert response.responses[0].partitions[0].records
            assert len(broker.growth) == 0
        finally:
            broker.close()
    asyncio.run(scenario())
