"""The demo's CDC chapter keeps working."""
from rich.console import Console

from headwater.demo import cdc_shop


def run_chapter(broker, schema):
    console = Console(record=True, width=160)
    cdc_shop.run(broker.bootstrap, console)
    text = console.export_text()
    assert f"orders rebuilt from shop.{schema}.orders equal the source table: True" in text
    rows = {r.split("│")[1].strip(): [c.strip() for c in r.split("│")[2:7]] for r in text.splitlines()
            if r.startswith("│")}
    assert rows[f"shop.{schema}.customers"] == ["50", "0", "0", "0", "0"]
    assert rows[f"shop.{schema}.orders"][:2] == ["200", "300"]  # snapshot, then every new order
    assert rows[f"shop.{schema}.orders"][3] == rows[f"shop.{schema}.orders"][4] != "0"  # a tombstone per delete


def test_shop_chapter_on_sqlite(broker, monkeypatch):
    monkeypatch.delenv("HEADWATER_DEMO_DSN", raising=False)
    run_chapter(broker, "main")


def test_shop_chapter_on_postgresql(broker, pg_db, monkeypatch):
    monkeypatch.setenv("HEADWATER_DEMO_DSN", pg_db)
    run_chapter(broker, "headwater_shop")
    # the demo leaves no slot behind to pin WAL
    from tests.support.cdc_harness import sql
    assert sql(pg_db, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'headwater_demo'") == [(0,)]
