"""Chapter: direct messaging next to a broker. StatsD metrics go over UDP into a durable
`metrics` topic, and a push subscription delivers them to a webhook whose endpoint goes down
for a while and comes back: every record still arrives (at least once, deduplicated by offset
at the endpoint), in batches of up to 50 records a POST. Meanwhile the same datagrams sent directly to a consumer that is offline
for a while are simply gone: the chapter's point, shown."""
from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

from confluent_kafka import Consumer, TopicPartition
from rich.table import Table

from headwater.demo.checks import CheckFailed
from headwater.push.receiver import WebhookReceiver
from headwater.testing import wait_until

TOPIC, METRICS = "metrics", 300
BATCH = 50  # records a webhook POST carries at most
OUTAGE = range(100, 200)  # the metrics sent while the webhook endpoint and the direct consumer are down


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


STATSD_PORT = _free_udp_port()


def broker_flags() -> list[str]:
    """What the demo's broker needs for this chapter: its StatsD listener."""
    return ["--statsd-listener", f"127.0.0.1:{STATSD_PORT}", TOPIC]


def _records_in(bootstrap: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo-messaging-count"})
    metadata = consumer.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
    total = sum(consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in metadata)
    consumer.close()
    return total


def run(bootstrap: str, console) -> None:
    console.rule("[bold]Direct messaging vs a broker: StatsD over UDP, webhooks, an endpoint that goes down")
    direct = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # a consumer listening directly, no broker
    direct.bind(("127.0.0.1", 0))
    direct_address = direct.getsockname()
    direct_received = 0
    with WebhookReceiver() as webhook:
        push = subprocess.Popen([sys.executable, "-m", "headwater", "push", TOPIC, webhook.url, "--from-beginning",
                                 "--group", "demo-webhook", "--backoff", "0.2", "--max-backoff", "1",
                                 "--max-attempts", "1000", "--batch-size", str(BATCH), "--bootstrap-server", bootstrap, "--log-level", "ERROR"])
        sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            for i in range(METRICS):
                if i == OUTAGE.start:
                    webhook.down = True   # the endpoint is being redeployed: 503 for every delivery
                    direct.close()        # and the direct consumer is offline
                    console.print(f"  metric {i}: webhook endpoint down, direct consumer offline")
                if i == OUTAGE.stop:
                    direct = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                    direct.bind(direct_address)
                    webhook.down = False
                    console.print(f"  metric {i}: both back")
                datagram = b"checkout.latency:%d|ms\ncheckout.orders:1|c" % (20 + i % 50)
                sender.sendto(datagram, ("127.0.0.1", STATSD_PORT))
                sender.sendto(datagram, direct_address)
                direct_received += _drain(direct) if i not in OUTAGE else 0
                time.sleep(0.01)
            time.sleep(0.1)
            direct_received += _drain(direct)
            stored = 2 * METRICS  # two metrics per datagram
            wait_until(lambda: _records_in(bootstrap) >= stored, timeout=30, what="metrics stored")
            wait_until(lambda: len(webhook.acknowledged) >= stored, timeout=120, what="webhook deliveries")
        finally:
            push.send_signal(signal.SIGTERM)
            push.wait(30)
            sender.close()
            direct.close()
    table = Table(title="the same StatsD datagrams, two ways")
    for column in ("path", "sent", "arrived", "lost"):
        table.add_column(column, justify="right" if column != "path" else "left")
    table.add_row("direct UDP to a consumer (offline for a while)", str(METRICS), str(direct_received),
                  str(METRICS - direct_received))
    table.add_row("UDP into the broker, pushed to a webhook (down for a while)", f"{stored} metrics",
                  f"{len(webhook.acknowledged)} in {webhook.answers[200]} POSTs of up to {BATCH} "
                  f"(503s answered meanwhile: {webhook.answers[503]})",
                  str(stored - len(webhook.acknowledged)))
    console.print(table)
    if len(webhook.acknowledged) != stored or direct_received > METRICS - len(OUTAGE):
        raise CheckFailed(f"expected every metric at the webhook and the direct consumer to miss the outage: "
                          f"{len(webhook.acknowledged)}/{stored} delivered, {direct_received}/{METRICS} direct")
    console.print("The broker buffered what the endpoint could not take and push retried it; the direct "
                  "consumer had no one to buffer for it.")


def _drain(sock: socket.socket) -> int:
    sock.setblocking(False)
    count = 0
    while True:
        try:
            sock.recv(65536)
            count += 1
        except BlockingIOError:
            return count
