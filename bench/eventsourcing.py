"""Event store speed next to the `eventsourcing` library (PyPI), same work, same databases.

    .venv/bin/python bench/eventsourcing.py [--smoke] [--events 10000] [--streams 10000] [--stores sqlite,postgres]

Rows: appends/s to one stream (load, command, save: one event per save), appends/s to
--streams new streams (one event each), loading a --events-event aggregate with and without
snapshots (every 10 events on both sides), and a projection rebuild (events/s): the current-
carts projection of the demo fed by each library's own read of its log, one transaction per
1,000 events. SQLite files in a temp directory; PostgreSQL is a throw-away local cluster
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
from tests.postgres import PostgresServer  # noqa: E402

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


def best_of(work, runs=3) -> float:
    return min(timed(work) for _ in range(runs))


def sku(n: int) -> str:
    return f"sku-{n % 50:02d}"


def append_rows(save, cart, add_item, new_cart, events: int, streams: int) -> dict[str, float]:
    """Appends/s to one stream (command, save: one event per save), then to new streams."""
    save(cart)

    def one_stream():
        for n in range(events):
            add_item(n)
            save(cart)

    def many_streams():
        for n in range(streams):
            save(new_cart(n))

    return {"appends/s, one stream": events / timed(one_stream),
            f"appends/s, {streams:,} streams": streams / timed(many_streams)}


# -- headwater
def headwater_rows(location: str, events: int, streams: int) -> dict[str, float]:
    store = open_store(location)
    repository = Repository(store, Cart)
    cart = Cart.open("long", "customer-1", "Ada")
    rows = append_rows(repository.save, cart, lambda n: cart.add_item(sku(n), 1, price_of(sku(n))),
                       lambda n: Cart.open(f"cart-{n}", "customer-1", "Ada"), events, streams)
    rows[f"load {events:,}-event aggregate, no snapshots (ms)"] = 1000 * best_of(
        lambda: Repository(store, Cart, use_snapshots=False).load("long"))
    rows[f"load {events:,}-event aggregate, snapshots (ms)"] = 1000 * best_of(lambda: repository.load("long"))
    total = store.head_position()
    rows["projection rebuild, events/s"] = total / timed(lambda: ProjectionRunner(store, CurrentCarts()).rebuild(BATCH))
    store.close()
    return rows


# -- the eventsourcing library
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


def library_rebuild(app: Application, location: str) -> int:
    """The same projection code (CurrentCarts.handle) fed by the library's notification log."""
    conn = (sqlite3.connect(location, isolation_level=None) if location.endswith(".db")
            else psycopg2.connect(location))
    projection = CurrentCarts()
    tables = ProjectionRunner.__new__(ProjectionRunner)
    tables.projection = projection
    names = tables.table_names("_library")
    with view_transaction(conn) as tx:
        for logical, name in names.items():
            tx.execute(f"DROP TABLE IF EXISTS {name}")
            tx.execute(f"CREATE TABLE {name} ({projection.tables[logical]})")
        tx.execute("CREATE TABLE IF NOT EXISTS library_checkpoint (name TEXT PRIMARY KEY, position BIGINT)")
    position, replayed = 0, 0
    while True:
        notifications = app.recorder.select_notifications(position, BATCH, inclusive_of_start=False)
        if not notifications:
            break
        with view_transaction(conn) as tx:
            view = View(tx, names)
            for notification in notifications:
                domain_event = app.mapper.to_domain_event(notification)
                data = {k: v for k, v in vars(domain_event).items()
                        if k not in ("originator_id", "originator_version", "timestamp", "originator_topic")}
                projection.handle(RecordedEvent(str(domain_event.originator_id), domain_event.originator_version,
                                                notification.id, "", notification.topic.rsplit(".", 1)[-1], 1, data,
                                                {}, 0.0), view)
            position = notifications[-1].id
            tx.execute("INSERT INTO library_checkpoint VALUES ('carts', ?) ON CONFLICT (name) "
                       "DO UPDATE SET position = excluded.position", (position,))
        replayed += len(notifications)
    conn.close()
    return replayed


def library_rows(location: str, events: int, streams: int) -> dict[str, float]:
    env = library_env(location)
    app = CartApp(env=env)
    cart = LibCart("customer-1", "Ada")
    rows = append_rows(app.save, cart, lambda n: cart.add(sku(n), 1, price_of(sku(n))),
                       lambda n: LibCart("customer-1", "Ada"), events, streams)
    plain = CartAppWithoutSnapshots(env={**env, "IS_SNAPSHOTTING_ENABLED": "n"})
    rows[f"load {events:,}-event aggregate, no snapshots (ms)"] = 1000 * best_of(lambda: plain.repository.get(cart.id))
    rows[f"load {events:,}-event aggregate, snapshots (ms)"] = 1000 * best_of(lambda: app.repository.get(cart.id))
    replayed = []
    seconds = timed(lambda: replayed.append(library_rebuild(app, location)))
    rows["projection rebuild, events/s"] = replayed[0] / seconds
    app.close()
    plain.close()
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
                mine = headwater_rows(ours, args.events, args.streams)
                peer = library_rows(theirs, args.events, args.streams)
                for measure, value in mine.items():
                    lower_is_better = measure.endswith("(ms)")
                    ratio = peer[measure] / value if lower_is_better else value / peer[measure]
                    table.add_row(store, measure, figure(value), figure(peer[measure]), f"{ratio:.2f}x faster"
                                  if ratio >= 1 else f"{1 / ratio:.2f}x slower")
        finally:
            if server is not None:
                server.stop()
    Console(width=140).print(table)
    return 0


if __name__ == "__main__":
    os.environ.pop("PERSISTENCE_MODULE", None)  # the library reads its configuration from the environment too
    sys.exit(main())
