"""The demo's consumer group chapter: load balancing with a hand-over, and fan-out."""
from rich.console import Console

from headwater.demo import groups, orders


def test_groups_chapter(broker):
    console = Console(record=True, width=160)
    orders.run(broker.bootstrap, console)
    groups.run(broker.bootstrap, console)
    text = console.export_text()
    assert f"inventory processed {orders.ORDERS:,} distinct orders of {orders.ORDERS:,}" in text
    assert f"analytics group (fan-out) read all {orders.ORDERS:,} orders too" in text
    assert "inventory-3 stopped after" in text and "→" in text  # the survivors were reassigned
