"""Event store speed next to the `eventsourcing` library (PyPI), same work, same databases.

    .venv/bin/python bench/eventsourcing.py [--smoke] [--events 10000] [--streams 10000] [--stores sqlite,postgres]

Rows: appends/s to one stream (a command, then a save: one event per save), appends/s to
--streams new streams (one event each), loading a --events-event aggregate with and without
snapshots (every 10 events on both sides), and a projection rebuild (events/s): the current-
carts projection of the demo fed by each library's own read of its log, one transaction per
1,000 events. The two sides run interleaved (ten chunks of appends, alternating who goes
first; loads best of five; rebuilds best of two), so a busy neighbour on the machine slows
both alike. SQLite files in a temp directory; PostgreSQL is a throw-away local cluster
(as in the tests). Installs `eventsourcing[postgres]` with pip if it is missing.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# this file's own directory comes first on the path and its name would hide the library
sys.path = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

if importlib.util.find_spec("eventsourcing") is None or importlib.util.find_spec("psycopg") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "eventsourcing[postgres]>=9.4,<10"], check=True)

import psycopg2  # noqa: E402
from eventsourcing.application import Application  # noqa: E402
from eventsourcing.domain import Aggregate, event  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from headwater.demo.shopping_cart import Cart, CurrentCarts, price_of  # noqa: E402
from headwater.eventsourcing import RecordedEvent, open_store  # noqa: E402
from headwater.eventsourcing.projection import ProjectionRunner, View  # noqa: E402
from headwater.eventsourcing.repository import Repository  # noqa: E402
from headwater.eventsourcing.store import Transaction  # noqa: E402
from tests.support.postgres import PostgresServer  # noqa: E402

SNAPSHOT_EVERY = Cart.snapshot_every
BATCH = 1000


class LibCart(Aggregate):
    """The demo's cart in the `eventsourcing` library's style."""

    @event("CartOpened")
    def __init__(self, customer_id: str, customer_name: str):
        self.customer_id = customer_id
        self.items: dict[str, int] = {}

    def add(self, sku: str, quantity: int, price_cents: int) -> None:
        if quantity < 1 or price_cents < 0:  # validate before the event exists, as ours does
            raise ValueError(sku)
        self._item_added(sku, quantity, price_cents)

    @event("ItemAdded")
    def _item_added(self, sku: str, quantity: int, price_cents: int) -> None:
        self.items[sku] = self.items.get(sku, 0) + quantity


class CartApp(Application):
    snapshotting_intervals = {LibCart: SNAPSHOT_EVERY}


class CartAppWithoutSnapshots(Application):
    name = CartApp.name  # the library names its PostgreSQL tables after the application


def timed(work) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def sku(n: int) -> str:
    return f"sku-{n % 50:02d}"


class HeadwaterSide:
    name = "headwater"

    def __init__(self, location: str):
        self.store = open_store(location)
        self.repository = Repository(self.store, Cart)
        self.cart = Cart.open("long", "customer-1", "Ada")
        self.repository.save(self.cart)

    def append_to_one_stream(self, n: int) -> None:
        self.cart.add_item(sku(n), 1, price_of(sku(n)))
        self.repository.save(self.cart)

    def append_to_new_stream(self, n: int) -> None:
        self.repository.save(Cart.open(f"cart-{n}", "customer-1", "Ada"))

    def load(self, snapshots: bool) -> None:
        Repository(self.store, Cart, use_snapshots=snapshots).load("long")

    def rebuild(self) -> int:
        return ProjectionRunner(self.store, CurrentCarts()).rebuild(BATCH)

    def close(self) -> None:
        self.store.close()


def library_env(location: str) -> dict[str, str]:
    if location.endswith(".db"):
        return {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": location}
    params = dict(item.split("=", 1) for item in location.split())
    return {"PERSISTENCE_MODULE": "eventsourcing.postgres", "POSTGRES_DBNAME": params["dbname"],
            "POSTGRES_HOST": params["host"], "POSTGRES_PORT": params["port"], "POSTGRES_USER": params["user"],
            "POSTGRES_PASSWORD": ""}


@contextmanager
def view_transaction(conn):
    """One transaction on the library's database, for the projection's view."""
    if isinstance(conn, sqlite3.Connection):
        cursor = conn.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        yield Transaction(cursor, "?")
        cursor.execute("COMMIT")
    else:
        with conn, conn.cursor() as cursor:
            yield Transaction(cursor, "%s")


class LibrarySide:
    name = "eventsourcing"

    def __init__(self, location: str):
        self.location = location
        env = library_env(location)
        self.app = CartApp(env=env)
        self.plain = CartAppWithoutSnapshots(env={**env, "IS_SNAPSHOTTING_ENABLED": "n"})
        self.cart = LibCart("customer-1", "Ada")
        self.app.save(self.cart)

    def append_to_one_stream(self, n: int) -> None:
        self.cart.add(sku(n), 1, price_of(sku(n)))
        self.app.save(self.cart)

    def append_to_new_stream(self, n: int) -> None:
        self.app.save(LibCart("customer-1", "Ada"))

    def load(self, snapshots: bool) -> None:
        (self.app if snapshots else self.plain).repository.get(self.cart.id)

    def rebuild(self) -> int:
        """The same projection code (CurrentCarts.handle) fed by the library's notification log."""
        conn = (sqlite3.connect(self.location, isolation_level=None) if self.location.endswith(".db")
                else psycopg2.connect(self.location))
        projection = CurrentCarts()
        names = {logical: f"library_{logical}" for logical in projection.tables}
        with view_transaction(conn) as tx:
            for logical, name in names.items():
                tx.execute(f"DROP TABLE IF EXISTS {name}")
                tx.execute(f"CREATE TABLE {name} ({projection.tables[logical]})")
            tx.execute("CREATE TABLE IF NOT EXISTS library_checkpoint (name TEXT PRIMARY KEY, position BIGINT)")
        position, replayed = 0, 0
        while True:
            notifications = self.app.recorder.select_notifications(position, BATCH, inclusive_of_start=False)
            if not notifications:
                break
            with view_transaction(conn) as tx:
                view = View(tx, names)
                for notification in notifications:
                    domain_event = self.app.mapper.to_domain_event(notification)
                    data = {k: v for k, v in vars(domain_event).items()
                            if k not in ("originator_id", "originator_version", "timestamp", "originator_topic")}
                    projection.handle(RecordedEvent(str(domain_event.originator_id), domain_event.originator_version,
                                                    notification.id, "", notification.topic.rsplit(".", 1)[-1], 1,
                                                    data, {}, 0.0), view)
                position = notifications[-1].id
                tx.execute("INSERT INTO library_checkpoint VALUES ('carts', ?) ON CONFLICT (name) "
                           "DO UPDATE SET position = excluded.position", (position,))
            replayed += len(notifications)
        conn.close()
        return replayed

    def close(self) -> None:
        self.app.close()
        self.plain.close()


def compare(sides: list, events: int, streams: int, chunks: int = 10) -> dict[str, dict[str, float]]:
    """Every measure for both sides, interleaved chunk by chunk so that a noisy neighbour
    on the machine slows both alike: {measure: {side name: figure}}."""
    rows: dict[str, dict[str, float]] = {}

    def appends(measure: str, total: int, step) -> None:
        seconds = dict.fromkeys((s.name for s in sides), 0.0)
        for chunk in range(chunks):
            numbers = range(chunk * total // chunks, (chunk + 1) * total // chunks)
            for side in sides[::1 if chunk % 2 else -1]:
                seconds[side.name] += timed(lambda: [step(side)(n) for n in numbers])
        rows[measure] = {name: total / spent for name, spent in seconds.items()}

    appends("appends/s, one stream", events, lambda side: side.append_to_one_stream)
    appends(f"appends/s, {streams:,} streams", streams, lambda side: side.append_to_new_stream)
    for snapshots in (False, True):
        measure = f"load {events:,}-event aggregate, {'' if snapshots else 'no '}snapshots (ms)"
        best = {s.name: min(timed(lambda: s.load(snapshots)) for _ in range(5)) for s in sides}
        rows[measure] = {name: 1000 * spent for name, spent in best.items()}
    rebuilds = {}
    for side in sides + sides[::-1]:  # twice each, best of two
        replayed = []
        spent = timed(lambda: replayed.append(side.rebuild()))
        rebuilds[side.name] = max(rebuilds.get(side.name, 0), replayed[0] / spent)
    rows["projection rebuild, events/s"] = rebuilds
    return rows


def figure(value: float) -> str:
    return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a few seconds: small sizes, to check the bench runs")
    parser.add_argument("--events", type=int, default=10_000, help="events appended to one stream, then loaded")
    parser.add_argument("--streams", type=int, default=10_000, help="streams with one event each")
    parser.add_argument("--stores", default="sqlite,postgres", help="comma-separated: sqlite, postgres")
    args = parser.parse_args()
    if args.smoke:
        args.events, args.streams = 200, 200
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    table = Table(title="event sourcing: headwater vs eventsourcing " + "(smoke)" * args.smoke)
    for column in ("store", "measure", "headwater", "eventsourcing", "headwater / eventsourcing"):
        table.add_column(column, justify="left" if column in ("store", "measure") else "right")
    with tempfile.TemporaryDirectory(prefix="headwater-bench-es-") as tmp:
        server = PostgresServer() if "postgres" in stores else None
        try:
            for store in stores:
                if store == "sqlite":
                    ours, theirs = str(Path(tmp) / "headwater.db"), str(Path(tmp) / "eventsourcing.db")
                else:
                    for name in ("headwater_bench", "library_bench"):
                        server.execute(f"CREATE DATABASE {name}")
                    ours = server.dsn.replace("dbname=postgres", "dbname=headwater_bench")
                    theirs = server.dsn.replace("dbname=postgres", "dbname=library_bench")
                sides = [HeadwaterSide(ours), LibrarySide(theirs)]
                for measure, figures in compare(sides, args.events, args.streams).items():
                    value, peer = figures["headwater"], figures["eventsourcing"]
                    ratio = peer / value if measure.endswith("(ms)") else value / peer  # ms: lower is better
                    table.add_row(store, measure, figure(value), figure(peer), f"{ratio:.2f}x faster"
                                  if ratio >= 1 else f"{1 / ratio:.2f}x slower")
                for side in sides:
                    side.close()
        finally:
            if server is not None:
                server.stop()
    Console(width=140).print(table)
    return 0


if __name__ == "__main__":
    os.environ.pop("PERSISTENCE_MODULE", None)  # the library reads its configuration from the environment too
    sys.exit(main())
