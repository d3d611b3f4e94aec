"""The Spark source's offset look-ups (`headwater.spark.cluster.Cluster`, run at every micro-batch)
on Apache Kafka right after the leader of a partition is killed: librdkafka asks the dead leader
until a call times out, so each try is short and a metadata refresh between tries finds the
leader the cluster elected. The offsets equal what the producer was acknowledged."""
from collections import Counter

from headwater.spark.cluster import Cluster
from headwater.spark.options import Subscription

from ..integration.clients import confluent_produce, sample_messages
from .conftest import leader_of

TOPIC = "spark-offsets"


def test_offset_look_ups_across_a_node_crash(kafka_cluster):
    bootstrap = kafka_cluster.bootstrap
    delivered = confluent_produce(bootstrap, TOPIC, sample_messages(60), acks="all")
    ends = {(TOPIC, p): n for p, n in Counter(p for p, *_ in delivered).items()}
    assert len(ends) == 3
    with kafka_cluster.node_down(leader_of(bootstrap, TOPIC)):
        cluster = Cluster({"bootstrap.servers": bootstrap})   # its first metadata still names the dead leader
        try:
            partitions = cluster.partitions(Subscription(topics=(TOPIC,)))
            assert cluster.latest(partitions) == ends
            assert cluster.earliest(partitions) == {tp: 0 for tp in ends}
            assert {tp: cluster.watermarks(tp) for tp in partitions} == {tp: (0, n) for tp, n in ends.items()}
        finally:
            cluster.close()
