"""Chapter: event sourcing and CQRS, with DDIA's shopping cart.

Customers add items to carts and remove them again; each cart is an event-sourced
aggregate in an event store (a SQLite file). Two read models come from the same log: the
current carts, and how often each item was added and then removed (the interest that the
carts' final state hides). The events reach a topic through the outbox relay; a projection
fed by the topic equals the one fed by the store. Then the current-carts projection's code
changes (it now keeps totals) and a rebuild from the log produces the new view. Finally a
customer asks to be forgotten: their key is deleted and their name is gone from every
replay, in the store and in the topic, while their carts still add up.
"""
from __future__ import annotations

import random
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from headwater.demo.checks import CheckFailed
from headwater.eventsourcing import RecordedEvent, WrongExpectedVersion, open_store
from headwater.eventsourcing.aggregate import Aggregate, CommandRejected, DomainEvent, applies
from headwater.eventsourcing.projection import Projection, ProjectionRunner, View
from headwater.eventsourcing.relay import OutboxRelay
from headwater.eventsourcing.repository import Repository
from headwater.eventsourcing.shredding import Personal, PersonalData
from headwater.eventsourcing.subscription import TopicSource
from headwater.eventsourcing.validation import EventTypes

TOPIC = "shop.carts"
PERSONAL = PersonalData({"CartOpened": Personal("customer_id", ("customer_name",))})


@dataclass(frozen=True)
class CartOpened(DomainEvent):
    customer_id: str
    customer_name: str


@dataclass(frozen=True)
class ItemAdded(DomainEvent):
    sku: str
    quantity: int
    price_cents: int


@dataclass(frozen=True)
class ItemRemoved(DomainEvent):
    sku: str
    quantity: int


@dataclass(frozen=True)
class CheckedOut(DomainEvent):
    pass


class Cart(Aggregate):
    snapshot_every = 10

    def __init__(self, id: str):
        super().__init__(id)
        self.customer_id: str | None = None
        self.items: dict[str, int] = {}
        self.prices: dict[str, int] = {}
        self.checked_out = False

    # -- commands: validate, then record
    @classmethod
    def open(cls, cart_id: str, customer_id: str, customer_name: str) -> "Cart":
        cart = cls(cart_id)
        cart.record(CartOpened(customer_id, customer_name))
        return cart

    def add_item(self, sku: str, quantity: int, price_cents: int) -> None:
        self._check_open()
        if quantity < 1 or price_cents < 0:
            raise CommandRejected(f"cannot add {quantity} x {sku} at {price_cents} cents")
        self.record(ItemAdded(sku, quantity, price_cents))

    def remove_item(self, sku: str, quantity: int) -> None:
        self._check_open()
        if not 1 <= quantity <= self.items.get(sku, 0):
            raise CommandRejected(f"cart {self.id} holds {self.items.get(sku, 0)} x {sku}, cannot remove {quantity}")
        self.record(ItemRemoved(sku, quantity))

    def check_out(self) -> None:
        self._check_open()
        if not self.items:
            raise CommandRejected(f"cart {self.id} is empty")
        self.record(CheckedOut())

    def _check_open(self) -> None:
        if self.customer_id is None or self.checked_out:
            raise CommandRejected(f"cart {self.id} is not open")

    # -- how each event changes state
    @applies(CartOpened)
    def _opened(self, event: CartOpened) -> None:
        self.customer_id = event.customer_id

    @applies(ItemAdded)
    def _added(self, event: ItemAdded) -> None:
        self.items[event.sku] = self.items.get(event.sku, 0) + event.quantity
        self.prices[event.sku] = event.price_cents

    @applies(ItemRemoved)
    def _removed(self, event: ItemRemoved) -> None:
        self.items[event.sku] -= event.quantity
        if not self.items[event.sku]:
            del self.items[event.sku]

    @applies(CheckedOut)
    def _checked_out(self, _event: CheckedOut) -> None:
        self.checked_out = True


class CurrentCarts(Projection):
    """Carts as they stand: owner, status, and what is in them."""
    name = "current_carts"
    tables = {"carts": "cart_id TEXT PRIMARY KEY, customer_name TEXT, status TEXT NOT NULL",
              "items": "cart_id TEXT NOT NULL, sku TEXT NOT NULL, quantity INTEGER NOT NULL, "
                       "PRIMARY KEY (cart_id, sku)"}

    def handle(self, event: RecordedEvent, view: View) -> None:
        data, cart = event.data, event.stream_id
        if event.type == "CartOpened":
            view.execute("INSERT INTO {carts} VALUES (?, ?, 'open')", (cart, data["customer_name"]))
        elif event.type in ("ItemAdded", "ItemRemoved"):
            change = data["quantity"] if event.type == "ItemAdded" else -data["quantity"]
            view.execute("INSERT INTO {items} VALUES (?, ?, ?) ON CONFLICT (cart_id, sku) "
                         "DO UPDATE SET quantity = {items}.quantity + excluded.quantity", (cart, data["sku"], change))
            view.execute("DELETE FROM {items} WHERE cart_id = ? AND quantity = 0", (cart,))
        elif event.type == "CheckedOut":
            view.execute("UPDATE {carts} SET status = 'checked out' WHERE cart_id = ?", (cart,))


class CurrentCartsWithTotals(CurrentCarts):
    """The projection's code after a change: carts also keep their total. Same name: a
    rebuild replaces the old view."""
    tables = {"carts": "cart_id TEXT PRIMARY KEY, customer_name TEXT, status TEXT NOT NULL, total_cents INTEGER",
              "items": CurrentCarts.tables["items"],
              "prices": "cart_id TEXT NOT NULL, sku TEXT NOT NULL, price_cents INTEGER NOT NULL, "
                        "PRIMARY KEY (cart_id, sku)"}

    def handle(self, event: RecordedEvent, view: View) -> None:
        data, cart = event.data, event.stream_id
        if event.type == "CartOpened":
            view.execute("INSERT INTO {carts} VALUES (?, ?, 'open', 0)", (cart, data["customer_name"]))
            return
        super().handle(event, view)
        if event.type == "ItemAdded":
            view.execute("INSERT INTO {prices} VALUES (?, ?, ?) ON CONFLICT (cart_id, sku) "
                         "DO UPDATE SET price_cents = excluded.price_cents", (cart, data["sku"], data["price_cents"]))
        if event.type in ("ItemAdded", "ItemRemoved"):
            sign = 1 if event.type == "ItemAdded" else -1
            view.execute("UPDATE {carts} SET total_cents = total_cents + ? * ? * (SELECT price_cents FROM {prices} "
                         "WHERE cart_id = ? AND sku = ?) WHERE cart_id = ?",
                         (sign, data["quantity"], cart, data["sku"], cart))


class AddedThenRemoved(Projection):
    """Per item, how many units were added to a cart and later taken out again."""
    name = "added_then_removed"
    tables = {"removals": "sku TEXT PRIMARY KEY, units INTEGER NOT NULL"}

    def handle(self, event: RecordedEvent, view: View) -> None:
        if event.type == "ItemRemoved":
            view.execute("INSERT INTO {removals} VALUES (?, ?) ON CONFLICT (sku) "
                         "DO UPDATE SET units = {removals}.units + excluded.units",
                         (event.data["sku"], event.data["quantity"]))


def current_carts(store, projection: CurrentCarts | None = None) -> dict:
    """The current-carts view as plain Python: {cart: (name, status, {sku: quantity})}."""
    names = ProjectionRunner(store, projection or CurrentCarts()).table_names()
    items = defaultdict(dict)
    for cart, sku, quantity in store.query(f"SELECT cart_id, sku, quantity FROM {names['items']}"):
        items[cart][sku] = quantity
    return {cart: (name, status, items[cart])
            for cart, name, status, *_ in store.query(f"SELECT * FROM {names['carts']}")}


def removals(store) -> dict[str, int]:
    names = ProjectionRunner(store, AddedThenRemoved()).table_names()
    return dict(store.query(f"SELECT sku, units FROM {names['removals']}"))


def price_of(sku: str) -> int:
    return 100 * (1 + int(sku.removeprefix("sku-")))


class Shop:
    """A day of shopping, with the truth kept in plain Python beside the event store."""

    def __init__(self, store, seed: int = 11, prefix: str = "cart"):
        self.prefix = prefix
        self.repository = Repository(store, Cart)
        self.rng = random.Random(seed)
        self.customers = {f"customer-{i:02d}": name for i, name in enumerate(
            ["Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Leslie", "Radia", "Ken",
             "Margaret", "Tony", "Jim", "Liskov", "Niklaus", "John"])}
        self.truth: dict[str, tuple[str, str, dict[str, int]]] = {}
        self.removed: Counter[str] = Counter()
        self.rejected = 0

    def day(self, carts: int = 40, actions: int = 600) -> None:
        skus = [f"sku-{i:02d}" for i in range(12)]
        for n in range(len(self.truth), len(self.truth) + carts):
            customer = self.rng.choice(sorted(self.customers))
            cart = Cart.open(f"{self.prefix}-{n:03d}", customer, self.customers[customer])
            self.repository.save(cart)
            self.truth[cart.id] = (self.customers[customer], "open", {})
        for _ in range(actions):
            cart = self.repository.load(self.rng.choice(sorted(self.truth)))
            name, status, items = self.truth[cart.id]
            sku, roll = self.rng.choice(skus), self.rng.random()
            try:
                if roll < 0.6:
                    quantity = self.rng.randint(1, 3)
                    cart.add_item(sku, quantity, price_of(sku))
                    items[sku] = items.get(sku, 0) + quantity
                elif roll < 0.97:
                    sku = self.rng.choice(sorted(items)) if items else sku
                    quantity = self.rng.randint(1, 2)
                    cart.remove_item(sku, quantity)
                    items[sku] -= quantity
                    if not items[sku]:
                        del items[sku]
                    self.removed[sku] += quantity
                else:
                    cart.check_out()
                    self.truth[cart.id] = (name, "checked out", items)
            except CommandRejected:
                self.rejected += 1  # validation failed: no event exists
                continue
            self.repository.save(cart)


def run(bootstrap: str, console: Console) -> None:
    console.rule("[bold]Event sourcing and CQRS: shopping carts")
    with tempfile.TemporaryDirectory(prefix="headwater-carts-") as tmp:
        store = open_store(str(Path(tmp) / "carts.db"), personal=PERSONAL)
        shop = Shop(store)
        shop.day()
        events = store.head_position()
        console.print(f"{len(shop.truth)} carts, {events} events in the store; {shop.rejected} commands "
                      "rejected by validation (no event recorded)")

        busy = next(cart for cart, (_, status, _) in sorted(shop.truth.items()) if status == "open")
        first, second = Repository(store, Cart).load(busy), Repository(store, Cart).load(busy)
        first.add_item("sku-99", 1, price_of("sku-99"))
        second.add_item("sku-98", 1, price_of("sku-98"))
        Repository(store, Cart).save(first)
        try:
            Repository(store, Cart).save(second)
        except WrongExpectedVersion as conflict:
            console.print(f"two clerks edit {busy} at once: the second save fails ({conflict})")
        shop.truth[busy][2]["sku-99"] = 1

        carts, interest = ProjectionRunner(store, CurrentCarts()), ProjectionRunner(store, AddedThenRemoved())
        carts.catch_up()
        interest.catch_up()
        _check(console, "current carts equal the carts kept in plain Python", current_carts(store) == shop.truth)
        _check(console, "added-then-removed counts equal plain Python", removals(store) == dict(shop.removed))
        table = Table(title="items added, then removed (what the final carts hide)")
        table.add_column("sku")
        table.add_column("units removed", justify="right")
        for sku, units in sorted(removals(store).items(), key=lambda kv: -kv[1])[:5]:
            table.add_row(sku, str(units))
        console.print(table)

        relay = OutboxRelay(store, bootstrap, TOPIC)
        while relay.publish_once():
            pass
        topic_store = open_store(str(Path(tmp) / "from_topic.db"), personal=PERSONAL)
        _share_keys(store, topic_store, shop.customers)
        source = TopicSource(topic_store, bootstrap, TOPIC)
        ProjectionRunner(topic_store, CurrentCarts(), source).catch_up()
        source.close()
        _check(console, f"current carts projected from topic {TOPIC} equal those from the store",
               current_carts(topic_store) == current_carts(store))

        with_totals = CurrentCartsWithTotals()
        replayed = ProjectionRunner(store, with_totals).rebuild()
        totals = {cart: total for cart, total in store.query("SELECT cart_id, total_cents FROM current_carts_carts")}
        expected = {cart: sum(q * price_of(sku) for sku, q in items.items())
                    for cart, (_, _, items) in shop.truth.items()}
        _check(console, f"projection code changed (totals): rebuilt from {replayed} events, totals right",
               totals == expected)

        customer = store.read_stream("cart-000")[0].data["customer_id"]
        name = shop.customers[customer]
        store.forget(customer)
        ProjectionRunner(store, with_totals).rebuild()
        replay = [e.data.get("customer_name") for e in store.read_all(0, 10 ** 6) if e.data.get("customer_id") == customer]
        in_topic = _topic_names(store, bootstrap, customer)
        view_names = {n for n, _, _ in current_carts(store, with_totals).values()}
        console.print(f"{customer} ({name}) asks to be forgotten: their key is deleted")
        _check(console, f"{name} is gone from every replay: store, topic, rebuilt view",
               replay and set(replay) == {None} and set(in_topic) == {None} and name not in view_names)
        _check(console, f"{customer}'s carts still replay to the same items",
               Repository(store, Cart).load("cart-000").items == shop.truth["cart-000"][2])
        store.close()
        topic_store.close()


def _share_keys(source, target, subjects) -> None:
    """The topic's reader uses the same subject keys (in production: the same key store)."""
    for subject in subjects:
        key = source.subject_key(subject)
        if key is not None:  # a customer with no cart has none
            target.keep_subject_key(subject, key)


def _topic_names(store, bootstrap: str, customer: str) -> list:
    source = TopicSource(store, bootstrap, TOPIC)
    names, checkpoint, done = [], None, False
    while not done:
        events, checkpoint, done = source.batch(checkpoint, 1000)
        names += [e.data.get("customer_name") for e in events if e.data.get("customer_id") == customer]
    source.close()
    return names


def _check(console: Console, claim: str, holds) -> None:
    console.print(f"{claim}: {bool(holds)}")
    if not holds:
        raise CheckFailed(claim)


# what `headwater events` and `headwater projections` find with --app
PROJECTIONS = [CurrentCartsWithTotals, AddedThenRemoved]
EVENT_TYPES = EventTypes(Cart.event_types.values())  # appends must construct these
