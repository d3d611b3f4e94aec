"""The log's promises: order within a partition, keys pinned to partitions, contiguous offsets."""
from collections import defaultdict

from tests.support.clients import confluent_consume, confluent_produce


def test_order_keys_and_contiguous_offsets(broker):
    messages = [(f"card-{i % 23}".encode(), f"{i}".encode(), []) for i in range(6000)]
    delivered = confluent_produce(broker.bootstrap, "ledger", messages, **{"enable.idempotence": True})
    consumed = confluent_consume(broker.bootstrap, "ledger", range(3), len(messages))
    assert len(consumed) == len(messages)

    partitions_of_key = defaultdict(set)
    for partition, _, key, _, _ in consumed:
        partitions_of_key[key].add(partition)
    assert all(len(p) == 1 for p in partitions_of_key.values()), "a key moved between partitions"

    for partition in range(3):
        rows = [r for r in consumed if r[0] == partition]
        assert [r[1] for r in rows] == list(range(len(rows))), "offsets are not contiguous from 0"
        # per key, the consumer sees values in the order they were produced
        per_key = defaultdict(list)
        for _, _, key, value, _ in rows:
            per_key[key].append(int(value))
        assert all(values == sorted(values) for values in per_key.values())
    assert sorted(consumed) == sorted(delivered)
