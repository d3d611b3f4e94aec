"""Crypto-shredding on every store, through a real broker: personal fields are never
stored or published in clear; after the subject's key is deleted they cannot be read back
from the store or the topic, and everything else still replays."""
from headwater.demo.shopping_cart import PERSONAL, Cart, CurrentCarts, Shop, current_carts
from headwater.eventsourcing.projection import ProjectionRunner
from headwater.eventsourcing.relay import OutboxRelay
from headwater.eventsourcing.repository import Repository
from headwater.eventsourcing.shredding import forget, subject_key
from headwater.eventsourcing.subscription import TopicSource

from .topic import read_topic


def names_in(events, customer):
    return [e.data["customer_name"] for e in events if e.type == "CartOpened" and e.data["customer_id"] == customer]


def test_forgotten_subject_is_unreadable_in_store_and_topic_and_the_rest_replays(broker, open_store):
    store = open_store(personal=PERSONAL)
    shop = Shop(store)
    shop.day(carts=20, actions=200)
    relay = OutboxRelay(store, broker.bootstrap, "carts")
    while relay.publish_once():
        pass
    opened = [e for e in store.read_all(0, 10 ** 6) if e.type == "CartOpened"]
    customer = opened[0].data["customer_id"]
    name = shop.customers[customer]
    their_carts = [e.stream_id for e in opened if e.data["customer_id"] == customer]
    raw_rows = store.read_all_rows(0, 10 ** 6)
    assert all(name not in row[6] for row in raw_rows)  # never stored in clear
    assert all(name.encode() not in value for _, _, value in read_topic(broker.bootstrap, "carts"))
    assert names_in(store.read_all(0, 10 ** 6), customer) == [name] * len(their_carts)

    assert forget(store, customer)
    assert subject_key(store, customer, create=False) is None
    everything = store.read_all(0, 10 ** 6)
    assert set(names_in(everything, customer)) == {None}
    others = {c for c in shop.customers if c != customer}
    assert all(names_in(everything, c) == [shop.customers[c]] * len(names_in(everything, c)) for c in others)
    # the topic holds the same ciphertext: read through the store's keys, the name is gone there too
    source = TopicSource(store, broker.bootstrap, "carts")
    from_topic, checkpoint, done = [], None, False
    while not done:
        events, checkpoint, done = source.batch(checkpoint, 500)
        from_topic += events
    source.close()
    assert len(from_topic) == len(everything)
    assert set(names_in(from_topic, customer)) == {None}
    # everything else still replays: the carts' items, and a projection rebuilt from the log
    for cart in their_carts:
        assert Repository(store, Cart).load(cart).items == shop.truth[cart][2]
    ProjectionRunner(store, CurrentCarts()).rebuild()
    view = current_carts(store)
    assert {cart: (name_, status, items) for cart, (name_, status, items) in shop.truth.items()
            if cart not in their_carts} == {c: v for c, v in view.items() if c not in their_carts}
    assert all(view[cart][0] is None and view[cart][2] == shop.truth[cart][2] for cart in their_carts)
