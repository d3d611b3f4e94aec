"""Chapter 2, consumer groups: an inventory service load-balances the orders, analytics fans out.

Three inventory consumers share the `orders` partitions (one group: each order to one of
them); an analytics group reads every order too. One inventory consumer is stopped
mid-way: its partitions move to the other two, which resume at its last commit.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter

from confluent_kafka import Consumer
from rich.table import Table

from headwater.demo.orders import ORDERS, PARTITIONS, TOPIC

STOP_AFTER = 400  # orders the third inventory consumer handles before it is stopped


class GroupMember(threading.Thread):
    """A consumer in a group that processes each batch of orders, then commits it."""

    def __init__(self, bootstrap: str, group: str, name: str, handle):
        super().__init__(daemon=True)
        self.name, self.handle = name, handle
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                  "heartbeat.interval.ms": 500})
        self.stopping = threading.Event()
        self.assignments: list[list[int]] = []
        self.processed = Counter()  # partition -> orders processed

    def on_assign(self, consumer, partitions):
        self.assignments.append(sorted(p.partition for p in partitions))

    def run(self) -> None:
        self.consumer.subscribe([TOPIC], on_assign=self.on_assign)
        while not self.stopping.is_set():
            batch = [m for m in self.consumer.consume(50, 0.2) if not m.error()]
            for msg in batch:
                self.handle(msg)
                self.processed[msg.partition()] += 1
            if batch:  # before the next consume, where a rebalance would take the partitions away
                self.consumer.commit(asynchronous=False)
        self.consumer.close()  # LeaveGroup: the others rebalance at once

    def stop(self) -> None:
        self.stopping.set()
        self.join()


def _wait(done, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError("the consumer groups did not get through the orders in time")
        time.sleep(0.01)


def run(bootstrap: str, console) -> None:
    console.rule("[bold]2. Consumer groups: load balancing and fan-out")
    lock = threading.Lock()
    stock, seen = Counter(), Counter()
    revenue = [0]

    def reserve_stock(msg):  # the inventory service's work: one order, one reservation
        order = json.loads(msg.value())
        time.sleep(0.0005)
        with lock:
            stock[order["product"]] -= order["quantity"]
            seen[(msg.partition(), msg.offset())] += 1

    def account(msg):
        order = json.loads(msg.value())
        revenue[0] += order["quantity"] * order["price_cents"]

    inventory = [GroupMember(bootstrap, "inventory", f"inventory-{i}", reserve_stock) for i in (1, 2, 3)]
    analytics = GroupMember(bootstrap, "analytics", "analytics-1", account)
    for member in [*inventory, analytics]:
        member.start()
    stopped = inventory[2]
    # Stop it only once all three have held partitions together: a member that joins first
    # may otherwise take every partition and its share of orders before the others arrive.
    _wait(lambda: all(m.assignments and m.assignments[-1] for m in inventory))
    _wait(lambda: sum(stopped.processed.values()) >= STOP_AFTER or len(seen) >= ORDERS)
    stopped.stop()
    console.print(f"{stopped.name} stopped after {sum(stopped.processed.values())} orders; "
                  "its partitions move to the others")
    survivors = inventory[:2]
    _wait(lambda: sorted(p for m in survivors for p in (m.assignments or [[]])[-1]) == list(range(PARTITIONS)))
    _wait(lambda: len(seen) >= ORDERS and sum(analytics.processed.values()) >= ORDERS)

    table = Table(title="inventory group: each order to one member")
    for column in ("member", "assignments (partitions)", "orders processed"):
        table.add_column(column)
    for member in inventory:
        history = " → ".join(",".join(map(str, a)) or "-" for a in member.assignments)
        table.add_row(member.name, history, f"{sum(member.processed.values()):,}")
    console.print(table)
    redelivered = sum(n - 1 for n in seen.values())
    console.print(f"inventory processed {len(seen):,} distinct orders of {ORDERS:,}; redelivered after "
                  f"the hand-over: {redelivered}")
    console.print(f"analytics group (fan-out) read all {sum(analytics.processed.values()):,} orders too; "
                  f"revenue ${revenue[0] / 100:,.2f}")
    console.print("the operator's view, [bold]headwater groups describe inventory[/]:")
    describe = subprocess.run([sys.executable, "-m", "headwater", "groups", "describe", "inventory",
                               "--bootstrap-server", bootstrap], capture_output=True, text=True,
                              env={**os.environ, "COLUMNS": str(console.width), "TTY_COMPATIBLE": "1",
                                   "NO_COLOR": "1"})  # its table, not the plain lines of a pipe
    console.print(describe.stdout or describe.stderr, markup=False, highlight=False)
    for member in [*survivors, analytics]:
        member.stop()
