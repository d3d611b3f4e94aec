"""The demo's share-group chapter: more workers than partitions, a dead worker's orders
redelivered, a poison order dead-lettered (its own checks raise CheckFailed otherwise)."""
from rich.console import Console

from headwater.demo import orders, share_queue


def test_share_queue_chapter(broker):
    console = Console(record=True, width=160)
    for chapter in (orders, share_queue):   # the orders chapter makes the stream the workers share
        chapter.run(broker.bootstrap, console)
    text = console.export_text()
    assert f"every one of the {orders.ORDERS - 1:,} good orders notified exactly once" in text
    assert "worker-8 died holding" in text and "with delivery count 2" in text
    assert f"poison order #{share_queue.POISON} failed 3 deliveries" in text
