"""The event store's contract, on SQLite and PostgreSQL."""
import threading
from dataclasses import dataclass

import pytest

from headwater.demo.shopping_cart import EVENT_TYPES
from headwater.eventsourcing import (ANY, NO_STREAM, IdempotencyConflict, MalformedEvent, NewEvent, StreamNotFound,
                                     WrongExpectedVersion)
from headwater.eventsourcing.aggregate import DomainEvent
from headwater.eventsourcing.sqlite_store import SqliteEventStore
from headwater.eventsourcing.upcasting import Upcasters
from headwater.eventsourcing.validation import EventTypes


def added(n, **extra):
    return NewEvent("ItemAdded", {"sku": f"sku-{n}", "quantity": n, **extra})


def run_writers(open_store, count, write):
    """`write(store, w)` in `count` threads at once, each with its own store; their errors raised here."""
    errors = []

    def run(w):
        try:
            write(open_store(), w)
        except Exception as exc:  # handed to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def bodies(events):
    return [(e.stream_id, e.version, e.data["sku"]) for e in events]


def test_append_and_read_forwards_backwards_and_all(store):
    assert store.append("cart-1", [added(1), added(2)], NO_STREAM) == 2
    assert store.append("cart-2", [added(3)], NO_STREAM) == 1
    assert store.append("cart-1", [added(4)], 2) == 3
    assert bodies(store.read_stream("cart-1")) == [("cart-1", 1, "sku-1"), ("cart-1", 2, "sku-2"),
                                                   ("cart-1", 3, "sku-4")]
    assert bodies(store.read_stream("cart-1", backwards=True)) == [("cart-1", 3, "sku-4"), ("cart-1", 2, "sku-2"),
                                                                   ("cart-1", 1, "sku-1")]
    assert bodies(store.read_stream("cart-1", from_version=2, backwards=True, limit=1)) == [("cart-1", 2, "sku-2")]
    assert bodies(store.read_stream("cart-1", from_version=3)) == [("cart-1", 3, "sku-4")]
    every = store.read_all()
    assert [e.data["sku"] for e in every] == ["sku-1", "sku-2", "sku-3", "sku-4"]
    assert [e.position for e in every] == sorted({e.position for e in every})
    assert bodies(store.read_all(every[1].position, limit=1)) == [("cart-2", 1, "sku-3")]
    assert store.streams() == [("cart-1", 3), ("cart-2", 1)]


def test_wrong_expected_version_writes_nothing(store):
    store.append("cart-1", [added(1)], NO_STREAM)
    for expected in (NO_STREAM, 2, 5):
        with pytest.raises(WrongExpectedVersion, match="at version 1, not the expected"):
            store.append("cart-1", [added(7), added(8)], expected)
    assert store.append("cart-1", [added(2)], ANY) == 2
    assert bodies(store.read_all()) == [("cart-1", 1, "sku-1"), ("cart-1", 2, "sku-2")]


def test_appends_are_idempotent_by_event_id(store):
    batch = [added(1), added(2)]
    assert store.append("cart-1", batch, NO_STREAM) == 2
    assert store.append("cart-1", batch, NO_STREAM) == 2  # a retry after a lost answer: same result
    assert len(store.read_all()) == 2
    with pytest.raises(IdempotencyConflict):
        store.append("cart-2", batch, NO_STREAM)  # the same events elsewhere are not a retry
    with pytest.raises(IdempotencyConflict):
        store.append("cart-1", [batch[0], added(3)], ANY)
    assert store.streams() == [("cart-1", 2)]


def test_bad_input_is_refused_and_nothing_written(store):
    store.append("cart-1", [added(1)], NO_STREAM)
    with pytest.raises(StreamNotFound, match="'nope' does not exist"):
        store.read_stream("nope")
    bad = [NewEvent("ItemAdded", {"sku": object()}), NewEvent("ItemAdded", {"price": float("nan")}),
           NewEvent("ItemAdded", ["not", "an", "object"]), NewEvent("", {}), NewEvent("ItemAdded", {}, 0),
           "not an event"]
    for event in bad:
        with pytest.raises(MalformedEvent):
            store.append("cart-1", [added(2), event], 1)  # the good event before it is not written either
    with pytest.raises(MalformedEvent):
        store.append("", [added(2)])
    with pytest.raises(MalformedEvent):
        store.append("cart-1", [])
    assert bodies(store.read_all()) == [("cart-1", 1, "sku-1")]


@pytest.mark.parametrize("event, message", [
    (NewEvent("ItemAdded", {"sku": "a", "quantity": 2}), "ItemAdded: missing field 'price_cents'"),
    (NewEvent("ItemAdded", {"sku": "a", "quantity": "2", "price_cents": 100}),
     "ItemAdded: field 'quantity' must be int, got '2'"),
    (NewEvent("ItemAdded", {"sku": "a", "quantity": True, "price_cents": 100}), "field 'quantity' must be int"),
    (NewEvent("ItemAdded", {"sku": None, "quantity": 2, "price_cents": 100}), "field 'sku' must be str"),
    (NewEvent("ItemAdded", {"sku": "a", "quantity": 2, "price_cents": 100, "colour": "red"}),
     "ItemAdded: unknown field 'colour'"),
    (NewEvent("ItemAddded", {}), "unknown event type 'ItemAddded'; the application's types are CartOpened, "
                                 "CheckedOut, ItemAdded, ItemRemoved"),
    (NewEvent("CheckedOut", {}, schema_version=2), "CheckedOut v2: the application's CheckedOut is v1"),
])
def test_with_the_apps_event_types_a_body_that_does_not_construct_its_class_is_refused(open_store, event, message):
    store = open_store(event_types=EVENT_TYPES)
    good = NewEvent("ItemAdded", {"sku": "a", "quantity": 2, "price_cents": 100})
    with pytest.raises(MalformedEvent) as refused:
        store.append("cart-1", [good, event])
    assert message in str(refused.value)
    assert store.streams() == []  # the good event before it is not written either
    assert store.append("cart-1", [good, NewEvent("CheckedOut", {})]) == 2


@dataclass(frozen=True)
class Renamed(DomainEvent):
    schema_version = 2
    quantity: int
    note: str | None = None


def test_an_old_version_is_checked_as_it_will_be_read_after_upcasting(open_store):
    upcasters = Upcasters()
    upcasters.register("Renamed", 1, lambda body: {"quantity": body.pop("qty"), **body})
    store = open_store(upcasters=upcasters, event_types=EventTypes([Renamed]))
    store.append("s", [NewEvent("Renamed", {"qty": 1}, 1), NewEvent("Renamed", {"quantity": 2, "note": "n"}, 2)])
    with pytest.raises(MalformedEvent, match="Renamed v1: its upcasters fail on this body: KeyError: 'qty'"):
        store.append("s", [NewEvent("Renamed", {"quantity": 1}, 1)])
    with pytest.raises(MalformedEvent, match="field 'quantity' must be int, got 1.5"):
        store.append("s", [NewEvent("Renamed", {"qty": 1.5}, 1)])
    assert [Renamed(**e.data) for e in store.read_stream("s")] == [Renamed(1), Renamed(2, "n")]


def test_racing_writers_exactly_one_wins_each_version(open_store):
    """Each round, every writer reads the same version, then all append two events expecting
    it at once: exactly one wins, the others get the conflict error, and no append is partial."""
    open_store().append("cart", [added(0)], NO_STREAM)
    writers, rounds = 6, 8
    read, outcomes = threading.Barrier(writers, timeout=60), []
    lock = threading.Lock()

    def writer(store, w):
        for r in range(rounds):
            version = store.stream_version("cart")
            read.wait()  # everyone has read the same version before anyone appends
            try:
                store.append("cart", [added(1, writer=w, round=r, half=0), added(2, writer=w, round=r, half=1)],
                             version)
                outcome = "won"
            except WrongExpectedVersion:
                outcome = "lost"
            with lock:
                outcomes.append((r, outcome))
            read.wait()  # the round is over before anyone reads again

    run_writers(open_store, writers, writer)
    for r in range(rounds):
        assert sorted(o for rr, o in outcomes if rr == r) == ["lost"] * (writers - 1) + ["won"]
    events = open_store().read_stream("cart")[1:]
    assert [e.version for e in events] == list(range(2, 2 + 2 * rounds))
    pairs = [(events[i].data, events[i + 1].data) for i in range(0, len(events), 2)]
    assert all(a["half"] == 0 and b["half"] == 1 and (a["writer"], a["round"]) == (b["writer"], b["round"])
               for a, b in pairs)  # each append's two events sit together: none partial
    assert [a["round"] for a, _ in pairs] == list(range(rounds))


def test_tailing_reader_sees_every_event_once_in_order_under_concurrent_commits(open_store):
    """Writers commit concurrently while a reader follows the global position; it must see
    every committed event exactly once, each stream in version order."""
    writers, appends = 4, 60
    done = threading.Event()

    def writer(store, w):
        for i in range(appends):
            store.append(f"stream-{w}-{i % 3}", [added(i, writer=w), added(i, writer=w)], ANY)

    seen = []

    def reader():
        store = open_store()
        position = 0
        while True:
            finished = done.is_set()  # read once more after the writers are done
            batch = store.read_all(position, 50)
            seen.extend(batch)
            if batch:
                position = batch[-1].position
            elif finished:
                return

    tail = threading.Thread(target=reader)
    tail.start()
    try:
        run_writers(open_store, writers, writer)
    finally:
        done.set()
        tail.join()
    truth = open_store().read_all(0, 10 ** 6)
    assert len(truth) == writers * appends * 2
    assert [e.event_id for e in seen] == [e.event_id for e in truth]
    for stream_id, _ in open_store().streams():
        assert [e.version for e in seen if e.stream_id == stream_id] == list(
            range(1, 1 + len([e for e in truth if e.stream_id == stream_id])))


def test_the_key_rows_keep_the_first_key_of_a_subject_until_it_is_forgotten(open_store):
    """The store's key rows: a second key offered for a subject (a concurrent writer's) loses to
    the first; forgetting deletes it, and says whether there was one."""
    store, first, second = open_store(), bytes(32), bytes(range(32))
    assert store.subject_key("ada") is None
    assert store.keep_subject_key("ada", first) == first
    assert open_store().keep_subject_key("ada", second) == first
    assert store.subject_key("ada") == first and store.subject_key("bob") is None
    assert store.forget("ada") and not store.forget("ada") and not store.forget("bob")
    assert store.subject_key("ada") is None
    assert store.keep_subject_key("ada", second) == second


def test_sqlite_stores_opened_at_once_on_a_new_file(tmp_path):
    """Several stores opening a fresh SQLite file at once all get it in WAL mode: switching to
    WAL takes a lock SQLite does not wait for, which once failed such an open with "database is locked"."""
    for attempt in range(50):
        path = str(tmp_path / f"new{attempt}.db")
        opened = []
        run_writers(lambda: SqliteEventStore(path), 6, lambda store, w: opened.append(store))
        assert len(opened) == 6
        for store in opened:
            assert store.query("PRAGMA journal_mode") == [("wal",)]
            store.close()


@pytest.mark.timeout(30)
def test_sqlite_stores_without_a_file_keep_their_own_journal_mode():
    """An in-memory or temporary database has no WAL; opening one must not wait for it."""
    for path, mode in ((":memory:", "memory"), ("", "delete")):
        store = SqliteEventStore(path)
        store.append("cart-1", [NewEvent("ItemAdded", {"sku": "a"})])
        assert [e.type for e in store.read_all()] == ["ItemAdded"]
        assert store.query("PRAGMA journal_mode") == [(mode,)]
        store.close()
