"""The demo's event-sourcing chapter keeps working (make demo runs it on its broker)."""
from rich.console import Console

from headwater.demo import shopping_cart


def test_shopping_cart_chapter(broker):
    console = Console(record=True, width=160)
    shopping_cart.run(broker.bootstrap, console)
    text = console.export_text()
    checks = [line for line in text.splitlines() if line.endswith((": True", ": False"))]
    assert len(checks) == 6 and all(line.endswith(": True") for line in checks), checks
    assert "the second save fails (stream 'cart-" in text
