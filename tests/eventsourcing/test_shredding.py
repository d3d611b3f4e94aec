"""Crypto-shredding on every store, through a real broker: personal fields are never
stored or published in clear; after the subject's key is deleted they cannot be read back
from the store or the topic, and everything else still replays."""
import base64
import hashlib
import json

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from headwater.demo.shopping_cart import PERSONAL, Cart, CurrentCarts, Shop, current_carts
from headwater.eventsourcing import MalformedEvent, NewEvent
from headwater.eventsourcing.projection import ProjectionRunner
from headwater.eventsourcing.relay import OutboxRelay
from headwater.eventsourcing.repository import Repository
from headwater.eventsourcing.subscription import TopicSource

from tests.support.events_topic import read_topic


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

    assert store.forget(customer)
    assert store.subject_key(customer) is None
    assert not store.forget(customer)
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


def opened(cart, customer, name):
    return cart, [NewEvent("CartOpened", {"customer_id": customer, "customer_name": name})]


def test_an_event_after_forget_gets_a_new_key_and_every_read_still_works(open_store):
    """What a forgotten subject shares afterwards is readable, what came before stays unreadable,
    and no read of the log fails: stream reads, the whole log, a projection rebuild."""
    store = open_store(personal=PERSONAL)
    store.append(*opened("cart-1", "ada", "Ada"))
    store.append("cart-1", [NewEvent("ItemAdded", {"sku": "a", "quantity": 2, "price_cents": 100})])
    store.append(*opened("cart-2", "bob", "Bob"))
    assert store.forget("ada")
    store.append(*opened("cart-3", "ada", "Ada again"))
    expected = {"cart-1": None, "cart-2": "Bob", "cart-3": "Ada again"}
    assert {e.stream_id: e.data["customer_name"] for e in store.read_all(0, 100) if e.type == "CartOpened"} == expected
    assert all(store.read_stream(cart)[0].data["customer_name"] == name for cart, name in expected.items())
    ProjectionRunner(store, CurrentCarts()).rebuild()
    assert {cart: name for cart, (name, _, _) in current_carts(store).items()} == expected
    assert current_carts(store)["cart-1"][2] == {"a": 2}
    # forgotten again: the later event goes the same way, nothing fails
    assert store.forget("ada")
    assert [e.data["customer_name"] for e in store.read_all(0, 100) if e.type == "CartOpened"] == [None, "Bob", None]


def test_a_tampered_ciphertext_still_fails_authentication(open_store):
    store = open_store(personal=PERSONAL)
    store.append(*opened("cart-1", "ada", "Ada"))
    other = json.loads(store.read_all_rows(0, 1)[0][6])
    body = {**other, "customer_name": {**other["customer_name"], "$encrypted": base64.b64encode(b"\0" * 40).decode()}}
    with store.transaction() as tx:
        tx.execute("UPDATE events SET data = ?", (json.dumps(body),))
    with pytest.raises(MalformedEvent, match="fails authentication"):
        store.read_all()


def test_a_store_sealed_before_key_ids_were_kept_reads_after_a_new_key(open_store):
    store = open_store(personal=PERSONAL)
    store.append(*opened("cart-1", "ada", "Ada"))
    legacy = json.loads(store.read_all_rows(0, 1)[0][6])
    del legacy["customer_name"]["key"]
    with store.transaction() as tx:
        tx.execute("UPDATE events SET data = ?", (json.dumps(legacy),))
    assert store.read_all()[0].data["customer_name"] == "Ada"
    store.forget("ada")
    store.append(*opened("cart-2", "ada", "Ada again"))
    assert [e.data["customer_name"] for e in store.read_all()] == [None, "Ada again"]


def test_the_stored_form_of_personal_fields_stays_readable_both_ways(open_store):
    """Byte compatibility with stores written before: the rows and key rows as they are kept
    ({"$encrypted": base64(nonce + AES-GCM ciphertext), "key": sha256(key)[:16]}, subject and
    field as associated data, base64 keys in subject_keys), sealed and opened here in plain
    `cryptography`, read through the store; and what the store appends opens the same way."""
    key, nonce = bytes(range(32)), bytes(12)
    sealed = AESGCM(key).encrypt(nonce, json.dumps("Ada").encode(), b"ada\0customer_name")
    body = {"customer_id": "ada", "customer_name": {"$encrypted": base64.b64encode(nonce + sealed).decode(),
                                                    "key": hashlib.sha256(key).hexdigest()[:16]}}
    store = open_store(personal=PERSONAL)
    with store.transaction() as tx:
        tx.execute("INSERT INTO subject_keys (subject, key) VALUES (?, ?)", ("ada", base64.b64encode(key).decode()))
        tx.execute("INSERT INTO events (stream_id, version, event_id, type, schema_version, data, metadata, "
                   "recorded_at) VALUES ('cart-1', 1, 'e-1', 'CartOpened', 1, ?, '{}', 1.5)", (json.dumps(body),))
    assert [(e.stream_id, e.version, e.event_id, e.data, e.metadata, e.recorded_at) for e in store.read_all()] == [
        ("cart-1", 1, "e-1", {"customer_id": "ada", "customer_name": "Ada"}, {}, 1.5)]

    store.append(*opened("cart-2", "bob", "Bob"))
    row = store.read_all_rows(1, 1)[0]
    field = json.loads(row[6])["customer_name"]
    bob_key = base64.b64decode(store.query("SELECT key FROM subject_keys WHERE subject = 'bob'")[0][0])
    raw = base64.b64decode(field["$encrypted"])
    assert field["key"] == hashlib.sha256(bob_key).hexdigest()[:16]
    assert json.loads(AESGCM(bob_key).decrypt(raw[:12], raw[12:], b"bob\0customer_name")) == "Bob"
