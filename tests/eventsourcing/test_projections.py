"""Projections on every store: views equal plain Python, checkpoints commit with the view
per batch, a projection killed mid-batch resumes to the same view, rebuild swaps in a view
made by changed code."""
import os
import subprocess
import sys
import threading
from pathlib import Path

from headwater.demo.shopping_cart import (AddedThenRemoved, CurrentCarts, CurrentCartsWithTotals, Shop, current_carts,
                                          price_of, removals)
from headwater.eventsourcing import NewEvent
from headwater.eventsourcing.projection import ProjectionRunner, skipped_events, statuses
from headwater.testing import wait_until

ROOT = Path(__file__).resolve().parents[2]


def shop_day(store, carts=20, actions=300):
    shop = Shop(store)
    shop.day(carts, actions)
    return shop


def test_projections_equal_plain_python_and_checkpoint_per_batch(store):
    shop = shop_day(store)
    carts, interest = ProjectionRunner(store, CurrentCarts()), ProjectionRunner(store, AddedThenRemoved())
    head = store.head_position()
    assert carts.catch_up(batch_size=50) == head
    assert interest.catch_up(batch_size=1000) == head
    assert current_carts(store) == shop.truth
    assert removals(store) == dict(shop.removed)
    assert carts.checkpoint() == {"position": head}
    assert carts.catch_up() == 0  # caught up: nothing applied twice
    shop.day(carts=5, actions=50)  # more business: only the new events are applied
    assert carts.catch_up() == store.head_position() - head
    assert current_carts(store) == shop.truth
    assert {s["projection"]: s["behind"] for s in statuses(store)} == {
        "current_carts": 0, "added_then_removed": store.head_position() - head}


def run_worker(location, batch, kill_at=0):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "tests.support.projection_worker", location, str(batch),
                           str(kill_at)], cwd=ROOT, env=env, timeout=120).returncode


def test_projection_killed_mid_batch_resumes_to_the_same_view(store, store_location):
    shop = shop_day(store)
    head = store.head_position()
    # each run counts the events it handles: it dies at positions 30, 75 and 210
    for kill_at, committed in ((30, 0), (75, 50), (160, 200)):
        assert run_worker(store_location, 50, kill_at) == -9
        checkpoint = ProjectionRunner(store, CurrentCarts()).checkpoint()
        assert (checkpoint or {}).get("position", 0) == committed  # the batch it died in left nothing behind
    assert run_worker(store_location, 50) == 0
    assert current_carts(store) == shop.truth  # what an uninterrupted run gives
    assert ProjectionRunner(store, CurrentCarts()).checkpoint() == {"position": head}


def test_rebuild_swaps_in_the_view_of_changed_code(store):
    shop = shop_day(store)
    ProjectionRunner(store, CurrentCarts()).catch_up()
    before = current_carts(store)
    assert ProjectionRunner(store, CurrentCartsWithTotals()).rebuild(batch_size=64) == store.head_position()
    assert current_carts(store, CurrentCartsWithTotals()) == before == shop.truth
    totals = dict(store.query("SELECT cart_id, total_cents FROM current_carts_carts"))
    assert totals == {cart: sum(q * price_of(sku) for sku, q in items.items())
                      for cart, (_, _, items) in shop.truth.items()}
    assert ProjectionRunner(store, CurrentCartsWithTotals()).checkpoint() == {"position": store.head_position()}
    assert [s["projection"] for s in statuses(store)] == ["current_carts"]  # no rebuild left over


def test_an_event_the_code_cannot_apply_is_skipped_recorded_and_the_rest_applied(store):
    """A body the projection's code fails on (the docs' append before bodies were checked: no
    price) must not stop the view for good: it is skipped, with its error recorded beside the
    checkpoint, and every other event, before and after it in the same batch, is applied."""
    shop = shop_day(store, carts=5, actions=40)
    cart = "cart-stray"  # (an aggregate could not load a stream holding it: the shop's carts go on)
    store.append(cart, [NewEvent("ItemAdded", {"sku": "sku-00", "quantity": 2})])  # no price_cents
    bad = store.head_position()
    shop.day(carts=2, actions=40)
    head = store.head_position()
    assert ProjectionRunner(store, CurrentCartsWithTotals()).rebuild(batch_size=1000) == head
    # the skipped event left nothing behind: its items update ran before the price lookup failed
    assert store.query("SELECT * FROM current_carts_items WHERE cart_id = ?", (cart,)) == []
    assert current_carts(store, CurrentCartsWithTotals()) == shop.truth
    assert dict(store.query("SELECT cart_id, total_cents FROM current_carts_carts")) == {
        c: sum(q * price_of(sku) for sku, q in items.items()) for c, (_, _, items) in shop.truth.items()}
    assert [(s["position"], s["stream"], s["type"], s["error"]) for s in skipped_events(store, "current_carts")] == [
        (bad, cart, "ItemAdded", "KeyError: 'price_cents'")]
    assert statuses(store) == [{"projection": "current_carts", "checkpoint": {"position": head},
                                "behind": 0, "skipped": 1}]
    # followed batch by batch the same, and the old code (no prices) applies the event
    ProjectionRunner(store, AddedThenRemoved()).catch_up(batch_size=7)
    assert removals(store) == dict(shop.removed)
    assert ProjectionRunner(store, CurrentCarts()).rebuild(batch_size=7) == head
    assert store.query("SELECT sku, quantity FROM current_carts_items WHERE cart_id = ?", (cart,)) == [("sku-00", 2)]
    assert skipped_events(store, "current_carts") == []  # the rebuilt view skipped nothing: the old record goes


def test_status_lists_the_applications_projections_run_or_not(store):
    shop_day(store, carts=2, actions=10)
    ProjectionRunner(store, AddedThenRemoved()).catch_up()
    head = store.head_position()
    assert statuses(store, ["current_carts", "added_then_removed"]) == [
        {"projection": "added_then_removed", "checkpoint": {"position": head}, "behind": 0, "skipped": 0},
        {"projection": "current_carts", "checkpoint": None, "behind": head, "skipped": 0}]


def test_following_projection_keeps_up_with_concurrent_writers(store, open_store):
    """A projection tailing the store while the shop writes ends equal to plain Python."""
    stop = threading.Event()
    follower = ProjectionRunner(open_store(), AddedThenRemoved())
    tail = threading.Thread(target=follower.follow, args=(stop.is_set,), kwargs={"interval": 0.01, "batch_size": 7})
    tail.start()
    shop = shop_day(store, carts=10, actions=200)
    head = store.head_position()
    # The follower's store is its thread's alone (stores are not shared between threads): read
    # its checkpoint through this thread's store.
    watcher = ProjectionRunner(store, AddedThenRemoved())
    wait_until(lambda: watcher.checkpoint() == {"position": head}, timeout=60, what="the projection to catch up")
    stop.set()
    tail.join()
    assert removals(store) == dict(shop.removed)
