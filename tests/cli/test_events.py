"""`headwater events` and `headwater projections` as a user runs them, on every store."""
import json
import os
import subprocess
import sys
from pathlib import Path

from headwater.demo.shopping_cart import Shop
from headwater.eventsourcing import NewEvent

ROOT = Path(__file__).resolve().parents[2]


def headwater(*args, store):
    result = subprocess.run([sys.executable, "-m", "headwater", *args, "--store", store], cwd=ROOT,
                            env=dict(os.environ), capture_output=True, text=True, timeout=60)
    return result.returncode, result.stdout, result.stderr


def test_events_commands(store, store_location):
    assert headwater("events", "append", "cart-1", "ItemAdded", '{"sku": "a", "quantity": 2}',
                     "--expected-version", "0", "--event-id", "e1", store=store_location)[:2] == (
        0, "cart-1 is at version 1\n")
    assert headwater("events", "append", "cart-1", "ItemAdded", '{"sku": "a", "quantity": 2}', "--event-id", "e1",
                     store=store_location)[:2] == (0, "cart-1 is at version 1\n")  # idempotent retry
    headwater("events", "append", "cart-2", "ItemAdded", '{"sku": "b", "quantity": 1}', store=store_location)
    headwater("events", "append", "cart-1", "ItemRemoved", '{"sku": "a", "quantity": 1}', store=store_location)
    code, out, _ = headwater("events", "read", "cart-1", "--backwards", "--json", store=store_location)
    assert code == 0
    assert [(r["version"], r["type"], r["data"]) for r in json.loads(out)] == [
        (2, "ItemRemoved", {"sku": "a", "quantity": 1}), (1, "ItemAdded", {"sku": "a", "quantity": 2})]
    code, out, _ = headwater("events", "streams", "--json", store=store_location)
    assert json.loads(out) == [{"stream": "cart-1", "version": 2}, {"stream": "cart-2", "version": 1}]
    code, out, _ = headwater("events", "tail", "--from-position", "1", "--no-follow", store=store_location)
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(e["stream"], e["version"]) for e in lines] == [("cart-2", 1), ("cart-1", 2)]
    assert lines[0]["position"] < lines[1]["position"] and lines[1]["data"] == {"sku": "a", "quantity": 1}


def test_bad_input_gets_one_line_errors_and_writes_nothing(store, store_location):
    store.append("cart-1", [NewEvent("X", {})])
    for args, message in [
        (("events", "append", "cart-1", "X", "{not json"), "event body is not JSON"),
        (("events", "append", "cart-1", "X", "[1, 2]"), "body and metadata must be JSON objects"),
        (("events", "append", "cart-1", "X", "{}", "--expected-version", "0"), "is at version 1, not the expected 0"),
        (("events", "read", "nope"), "stream 'nope' does not exist"),
        (("projections", "rebuild", "nope", "--app", "headwater.demo.shopping_cart"), "no projection named 'nope'"),
    ]:
        code, out, err = headwater(*args, store=store_location)
        assert code == 1 and err.startswith("headwater: error: ") and message in err and len(err.splitlines()) == 1
    assert store.streams() == [("cart-1", 1)]


def test_append_with_the_app_checks_bodies_against_its_event_classes(store, store_location):
    app = ("--app", "headwater.demo.shopping_cart")
    code, out, err = headwater("events", "append", "cart-1", "ItemAdded", '{"sku": "a", "quantity": 2}', *app,
                               store=store_location)
    assert (code, out, err) == (1, "", "headwater: error: ItemAdded: missing field 'price_cents'\n")
    assert headwater("events", "append", "cart-1", "ItemAdded", '{"sku": "a", "quantity": 2, "price_cents": 150}',
                     *app, store=store_location)[:2] == (0, "cart-1 is at version 1\n")
    assert [e.data for e in store.read_stream("cart-1")] == [{"sku": "a", "quantity": 2, "price_cents": 150}]


def test_projections_status_and_rebuild(store, store_location):
    Shop(store).day(carts=5, actions=40)
    head = store.head_position()
    code, out, _ = headwater("projections", "rebuild", "current_carts", "--app", "headwater.demo.shopping_cart",
                             store=store_location)
    assert code == 0 and out.startswith(f"current_carts: rebuilt from {head} events")
    code, out, _ = headwater("projections", "status", "--json", store=store_location)
    assert json.loads(out) == [{"projection": "current_carts", "checkpoint": {"position": head},
                                "behind": 0, "skipped": 0}]


def test_the_docs_append_then_the_apps_projections_status_and_rebuild(store, store_location):
    """The docs' walk-through with the demo app: status lists both projections before any ran; an
    event appended without the app (no price) is skipped by the rebuild, which completes, and shown."""
    app = ("--app", "headwater.demo.shopping_cart")
    code, out, _ = headwater("projections", "status", "--json", *app, store=store_location)
    assert (code, [(s["projection"], s["checkpoint"]) for s in json.loads(out)]) == (
        0, [("added_then_removed", None), ("current_carts", None)])
    headwater("events", "append", "cart-1", "ItemAdded", '{"sku": "a", "quantity": 2}', store=store_location)
    headwater("events", "append", "cart-1", "ItemAdded", '{"sku": "b", "quantity": 1, "price_cents": 150}', *app,
              store=store_location)
    code, out, err = headwater("projections", "rebuild", "current_carts", *app, store=store_location)
    assert code == 0 and out.startswith("current_carts: rebuilt from 2 events")
    assert "failed on 1 event(s), skipped: headwater projections skipped current_carts" in out
    assert "projection current_carts skips ItemAdded at position 1 (cart-1 v1): KeyError: 'price_cents'" in err
    code, out, _ = headwater("projections", "status", "--json", *app, store=store_location)
    assert [(s["projection"], s["behind"], s["skipped"]) for s in json.loads(out)] == [
        ("added_then_removed", 2, 0), ("current_carts", 0, 1)]
    code, out, _ = headwater("projections", "skipped", "current_carts", "--json", store=store_location)
    assert [(s["position"], s["stream"], s["error"]) for s in json.loads(out)] == [
        (1, "cart-1", "KeyError: 'price_cents'")]
    assert store.query("SELECT cart_id, sku, quantity FROM current_carts_items") == [("cart-1", "b", 1)]
