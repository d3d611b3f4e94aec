"""`make demo` with $HEADWATER_DEMO_BOOTSTRAP set runs its chapters against that cluster and starts
no broker of its own: here its first chapter (the partitioned log) on Apache Kafka, its topic
created with the cluster's default replication factor (3 here; it asked for 1, which a lost
node would lose), and the chapter that needs Headwater's own broker skipped with a line
saying so."""
import io

from confluent_kafka.admin import AdminClient
from rich.console import Console

from headwater.demo import flagship, messaging, orders

from ..integration.clients import log_end_offsets


def test_a_chapter_runs_against_the_cluster(kafka_cluster, monkeypatch):
    monkeypatch.setenv(flagship.EXTERNAL_BOOTSTRAP, kafka_cluster.bootstrap)
    monkeypatch.setattr(flagship, "CHAPTERS", [orders, messaging])
    monkeypatch.setattr(flagship, "BrokerProcess", None)   # it must not start one
    printed = io.StringIO()
    monkeypatch.setattr(flagship, "Console", lambda: Console(file=printed, width=200))
    assert flagship.main([]) == 0, printed.getvalue()
    assert "skipped, as they need Headwater's own broker: messaging" in printed.getvalue()
    assert log_end_offsets(kafka_cluster.bootstrap, orders.TOPIC, range(orders.PARTITIONS)) == orders.ORDERS
    topic = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap}).list_topics(orders.TOPIC, timeout=30)
    assert {len(p.replicas) for p in topic.topics[orders.TOPIC].partitions.values()} == {3}
