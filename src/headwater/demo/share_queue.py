"""Chapter 3, queues on the log: a pool of notification workers shares the orders as a share group.

DDIA ch. 11's JMS/AMQP style, served from the same `orders` log: each order goes to one of
eight workers (more workers than partitions), each worker acknowledges the orders it has
notified. One worker dies holding orders: when their acquisition locks expire they are
redelivered to the others, after later orders of the same partition (the reordering DDIA
warns of: m3 processed after m4). One poison order fails every time it is delivered and
lands in the dead-letter topic when its delivery attempts run out.
"""
from __future__ import annotations

import json
import threading
import time

from confluent_kafka import AcknowledgeType, Consumer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from rich.table import Table

from headwater.demo.checks import CheckFailed
from headwater.demo.orders import ORDERS, PARTITIONS, TOPIC

GROUP, DEAD_LETTERS = "notifications", "orders-dlq"
WORKERS = 8
POISON = 1234           # the order whose notification always fails
LOCK_MS, ATTEMPTS = 2000, 3
CONFIGS = {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": str(LOCK_MS),
           "share.delivery.count.limit": str(ATTEMPTS), "errors.deadletterqueue.topic.name": DEAD_LETTERS,
           "errors.deadletterqueue.copy.record.enable": "true"}


class Worker(threading.Thread):
    """A notification worker: notifies each order, then acknowledges it (releases it when notifying fails)."""

    def __init__(self, bootstrap: str, name: str, journal: list, lock: threading.Lock, dies: bool = False):
        super().__init__(daemon=True)
        self.name, self.journal, self.lock, self.dies = name, journal, lock, dies
        self.consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "client.id": name,
                                       "share.acknowledgement.mode": "explicit", "max.poll.records": 50})
        self.stopping = threading.Event()
        self.held: list[tuple[int, int, int]] = []     # (partition, offset, order id) a dying worker took with it

    def run(self) -> None:
        self.consumer.subscribe([TOPIC])
        while not self.stopping.is_set():
            batch = [m for m in self.consumer.poll(0.2) if not m.error()]
            if batch and self.dies:      # it crashes before notifying anyone: the orders stay acquired
                self.held = [(m.partition(), m.offset(), json.loads(m.value())["order_id"]) for m in batch]
                self.stopping.wait()
                break
            for msg in batch:
                order = json.loads(msg.value())
                if order["order_id"] == POISON:
                    self.consumer.acknowledge(msg, AcknowledgeType.RELEASE)
                    continue
                with self.lock:
                    self.journal.append((time.monotonic(), msg.partition(), msg.offset(), order["order_id"],
                                         msg.delivery_count(), self.name))
                self.consumer.acknowledge(msg, AcknowledgeType.ACCEPT)
        self.consumer.close()


def _dead_letters(bootstrap: str) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo-dlq-reader", "auto.offset.reset": "earliest"})
    consumer.subscribe([DEAD_LETTERS])
    letters, deadline = [], time.monotonic() + 10
    while not letters and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            letters.append(msg)
    consumer.close()
    return letters


def run(bootstrap: str, console) -> None:
    console.rule("[bold]3. Queues on the log: a share group of notification workers")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(DEAD_LETTERS, 1)])[DEAD_LETTERS].result(30)
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in CONFIGS.items()]
    for future in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, GROUP,
                                                                  incremental_configs=entries)]).values():
        future.result(30)
    journal: list = []
    lock = threading.Lock()
    workers = [Worker(bootstrap, f"worker-{i}", journal, lock, dies=i == WORKERS) for i in range(1, WORKERS + 1)]
    dead = workers[-1]
    deadline = time.monotonic() + 120
    # the dying worker first, alone until it holds orders: a ShareFetch acquires whole batches of
    # the log, and the orders chapter wrote each partition's orders in a few big ones
    dead.start()
    while not dead.held and time.monotonic() < deadline:
        time.sleep(0.05)
    for worker in workers[:-1]:
        worker.start()
    while len({entry[3] for entry in journal}) < ORDERS - 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    letters = _dead_letters(bootstrap)
    for worker in workers:
        worker.stopping.set()
    for worker in workers:
        worker.join()

    processed = [entry[3] for entry in journal]
    if sorted(processed) != [i for i in range(ORDERS) if i != POISON]:
        raise CheckFailed(f"the workers notified {len(set(processed))} distinct orders ({len(processed)} "
                          f"notifications); expected each of the {ORDERS - 1} good orders once")
    table = Table(title=f"share group {GROUP}: {WORKERS} workers on {PARTITIONS} partitions")
    for column in ("worker", "orders notified", "partitions served"):
        table.add_column(column)
    for worker in workers:
        mine = [e for e in journal if e[5] == worker.name]
        served = ",".join(map(str, sorted({e[1] for e in mine}))) or "-"
        table.add_row(worker.name + (" (died)" if worker is dead else ""), f"{len(mine):,}", served)
    console.print(table)
    console.print(f"every one of the {ORDERS - 1:,} good orders notified exactly once")

    by_position = {(e[1], e[2]): e for e in journal}
    # the poison order may be among them: it is released, never notified, so it has no journal entry
    redelivered = [by_position[(p, o)] for p, o, order in dead.held if order != POISON]
    if not dead.held or any(e[4] != 2 for e in redelivered):
        raise CheckFailed(f"{dead.name} held {len(dead.held)} orders; their redeliveries should have "
                          f"delivery count 2: {[e[4] for e in redelivered]}")
    console.print(f"{dead.name} died holding {len(dead.held)} orders; after the {LOCK_MS} ms acquisition "
                  f"lock they went to {', '.join(sorted({e[5] for e in redelivered}))} with delivery count 2")
    later = next(((held, by_position[(held[1], held[2] + 1)]) for held in redelivered
                  if (held[1], held[2] + 1) in by_position and by_position[(held[1], held[2] + 1)][0] < held[0]), None)
    if later is not None:
        held, after = later
        console.print(f"reordering: order #{held[3]} (partition {held[1]}, offset {held[2]}) was notified after "
                      f"order #{after[3]} (offset {after[2]}), which came after it in the log")
    if [json.loads(m.value())["order_id"] for m in letters] != [POISON]:
        raise CheckFailed(f"expected poison order #{POISON} in {DEAD_LETTERS}, found {len(letters)} dead letters")
    headers = {k: v.decode() for k, v in letters[0].headers()}
    console.print(f"poison order #{POISON} failed {headers['__dlq.errors.delivery.count']} deliveries and landed "
                  f"in [bold]{DEAD_LETTERS}[/] with headers:")
    console.print({k: v for k, v in headers.items() if k.startswith("__dlq.")})
