"""Change data capture from PostgreSQL and SQLite into Apache Kafka (three nodes, replication 3,
min.insync.replicas 2), the node leading its first partition killed while the writer and the connector run: the change topic
replays to the source table, which plain Python's replay of the writer's log equals, and every
committed change is there once in commit order per key."""
import pytest

from ..cdc.harness import InThread, apply, expected_history
from ..cdc.sources import source_for
from ..cdc.topics import read_topic, replay
from .conftest import leader_of

PRELOAD = 200


@pytest.fixture(params=["postgres", "sqlite"])
def source(request, kafka_cluster, tmp_path):
    return source_for(request, kafka_cluster, tmp_path)


def test_changes_survive_a_node_crash(source, kafka_cluster):
    source.create_acct(PRELOAD)
    initial = {i: i for i in range(1, PRELOAD + 1)}
    run = InThread(source.connector())
    run.wait(source.streaming, what="the stream to start")
    writer = source.writer(PRELOAD + 1)
    writer.start()

    def more_writes(count):
        written = len(writer.log)
        run.wait(lambda: len(writer.log) >= written + count, what=f"{count} more writes")
    more_writes(50)
    with kafka_cluster.node_down(leader_of(kafka_cluster.bootstrap, source.topic)):
        more_writes(150)
    more_writes(50)
    writer.stop()
    source.caught_up()
    run.close()

    table, history = replay(read_topic(kafka_cluster.bootstrap, source.topic))
    assert {key: row["v"] for key, row in table.items()} == source.rows() == apply(initial, writer.log)
    got = {key: [(op, row["v"]) for op, row in ops] for key, ops in history.items()}
    assert got == expected_history(initial, writer.log, source.deleted_v)
