"""The demo's chapters keep working (make demo runs them all on one broker)."""
from rich.console import Console

from headwater.demo import orders, payments, schemas


def test_orders_chapter(broker):
    console = Console(record=True, width=120)
    orders.run(broker.bootstrap, console)
    text = console.export_text()
    assert "every customer's orders sit in exactly one partition: True" in text
    rows = [line for line in text.splitlines() if line.startswith("│")]
    assert sum(int(r.split("│")[2].strip().replace(",", "")) for r in rows) == orders.ORDERS


def test_payments_chapter(broker):
    console = Console(record=True, width=120)
    payments.run(broker.bootstrap, console)   # raises CheckFailed if the ledger differs from plain Python's
    text = console.export_text()
    assert "every payment in the ledger exactly once: True" in text
    assert "killed (SIGKILL) mid-transaction" in text


def test_schemas_chapter(start_broker):
    broker = start_broker("--http-listener", "127.0.0.1:0")
    console = Console(record=True, width=120)
    schemas.run(broker.bootstrap, console, broker.console_url)   # raises CheckFailed if a check fails
    text = console.export_text()
    assert "currency without a default: refused (409)" in text and "registered as v2" in text
    assert "v1's orders get currency EUR: True" in text
