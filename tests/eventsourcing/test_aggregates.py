"""Aggregates, snapshots and upcasting on every store: state rebuilt from events equals
state kept incrementally; snapshot + tail equals full replay; old event versions load."""
import random

import pytest

from headwater.demo.shopping_cart import Cart, price_of
from headwater.eventsourcing import NewEvent, UnknownSchemaVersion, WrongExpectedVersion
from headwater.eventsourcing.aggregate import CommandRejected
from headwater.eventsourcing.repository import Repository
from headwater.eventsourcing.upcasting import Upcasters


def busy_cart(repository, cart_id, actions, seed=3):
    """Random commands on one cart, saved after each; the truth kept in a plain dict."""
    rng = random.Random(seed)
    cart = Cart.open(cart_id, "customer-1", "Ada")
    repository.save(cart)
    truth = {}
    for _ in range(actions):
        sku = f"sku-{rng.randrange(5)}"
        if rng.random() < 0.6:
            cart.add_item(sku, 2, price_of(sku))
            truth[sku] = truth.get(sku, 0) + 2
        elif truth.get(sku):
            cart.remove_item(sku, 1)
            truth[sku] -= 1
            truth = {k: v for k, v in truth.items() if v}
        repository.save(cart)
    return cart, truth


def test_commands_validate_before_any_event_exists(store):
    repository = Repository(store, Cart)
    cart = Cart.open("cart-1", "customer-1", "Ada")
    repository.save(cart)
    for command in (lambda: cart.remove_item("sku-1", 1), lambda: cart.add_item("sku-1", 0, 100),
                    lambda: cart.check_out()):
        with pytest.raises(CommandRejected):
            command()
    assert repository.save(cart) == 1
    assert [e.type for e in store.read_stream("cart-1")] == ["CartOpened"]
    with pytest.raises(CommandRejected):
        Cart("cart-2").add_item("sku-1", 1, 100)  # never opened


def test_replay_equals_incremental_state_and_snapshots_agree(store):
    cart, truth = busy_cart(Repository(store, Cart), "cart-1", 120)
    assert cart.items == truth
    full = Repository(store, Cart, use_snapshots=False).load("cart-1")
    snapped = Repository(store, Cart).load("cart-1")
    assert full.items == snapped.items == truth
    assert full.version == snapped.version == cart.version == store.stream_version("cart-1")
    version, state = store.latest_snapshot("cart-1")
    assert version % Cart.snapshot_every == 0 and 0 <= cart.version - version < Cart.snapshot_every
    # the snapshot equals a replay of exactly the events it summarises
    prefix = Cart("cart-1")
    for event in store.read_stream("cart-1", limit=version):
        prefix.replay(event)
    assert state == prefix.state()


def test_a_stale_aggregate_cannot_save(store):
    repository = Repository(store, Cart)
    repository.save(Cart.open("cart-1", "customer-1", "Ada"))
    first, second = repository.load("cart-1"), repository.load("cart-1")
    first.add_item("sku-1", 1, 100)
    second.add_item("sku-2", 1, 100)
    repository.save(first)
    with pytest.raises(WrongExpectedVersion):
        repository.save(second)
    assert repository.load("cart-1").items == {"sku-1": 1}


def test_old_event_versions_are_upcast_on_read(open_store):
    """ItemAdded v1 had `qty` and no price; v2 renamed it; v3 added the price."""
    old = open_store()
    old.append("cart-1", [NewEvent("CartOpened", {"customer_id": "c", "customer_name": "Ada"}),
                          NewEvent("ItemAdded", {"sku": "sku-1", "qty": 2}, schema_version=1),
                          NewEvent("ItemAdded", {"sku": "sku-2", "quantity": 1}, schema_version=2)])
    upcasters = Upcasters()

    @upcasters.upcaster("ItemAdded", 1)
    def rename_qty(body):
        body["quantity"] = body.pop("qty")
        return body

    upcasters.register("ItemAdded", 2, lambda body: {**body, "price_cents": 0})
    store = open_store(upcasters=upcasters)
    cart = Repository(store, Cart).load("cart-1")
    assert cart.items == {"sku-1": 2, "sku-2": 1}
    assert [e.schema_version for e in store.read_stream("cart-1")][1:] == [3, 3]
    assert old.read_stream("cart-1")[1].data == {"sku": "sku-1", "qty": 2}  # stored as written: never rewritten
    cart.add_item("sku-3", 1, 100)  # new events are written at the current version
    Repository(store, Cart).save(cart)
    with pytest.raises(UnknownSchemaVersion):  # a version no upcaster leads from: refused, nothing written
        store.append("cart-1", [NewEvent("ItemAdded", {"sku": "x"}, schema_version=9)])
    assert store.stream_version("cart-1") == 4


def test_a_stored_version_without_upcaster_is_a_clear_error(open_store):
    open_store().append("cart-1", [NewEvent("ItemAdded", {"sku": "sku-1", "qty": 2}, schema_version=1)])
    upcasters = Upcasters()
    upcasters.register("ItemAdded", 2, lambda body: body)  # 2 -> 3, but nothing from 1
    with pytest.raises(UnknownSchemaVersion, match="ItemAdded v1: no upcaster"):
        open_store(upcasters=upcasters).read_stream("cart-1")


def test_a_subclassed_aggregate_keeps_its_bases_appliers(store):
    class GiftCart(Cart):
        pass

    repository = Repository(store, GiftCart)
    cart = GiftCart.open("gift-1", "customer-1", "Ada")
    cart.add_item("sku-1", 2, 100)
    repository.save(cart)
    assert repository.load("gift-1").items == {"sku-1": 2}
