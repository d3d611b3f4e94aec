"""The demo's CDC chapter keeps working."""
from rich.console import Console

from headwater.demo import cdc_shop


def test_shop_chapter_rebuilds_orders_from_the_topic(broker):
    console = Console(record=True, width=140)
    cdc_shop.run(broker.bootstrap, console)
    text = console.export_text()
    assert "orders rebuilt from shop.main.orders equal the source table: True" in text
    rows = {r.split("│")[1].strip(): [c.strip() for c in r.split("│")[2:7]] for r in text.splitlines()
            if r.startswith("│")}
    assert rows["shop.main.customers"] == ["50", "0", "0", "0", "0"]
    assert rows["shop.main.orders"][:2] == ["200", "300"]  # snapshot, then every new order
    assert rows["shop.main.orders"][3] == rows["shop.main.orders"][4] != "0"  # a tombstone per delete
