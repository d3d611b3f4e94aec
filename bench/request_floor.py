"""What one request costs a server on this machine, from a bare socket up to a Kafka broker.

    .venv/bin/python bench/request_floor.py [--requests N] [--partitions P] [--smoke]

One client sends size-prefixed requests on one TCP connection, one at a time (the next
after the answer), as a producer paced at 2,000 msg/s over many partitions does: each
request then arrives alone and is served alone. The figure is the server process's CPU
time per request (user + system, from /proc), next to the round trip the client sees, in
two passes: with nothing else running, and with a process spinning on a core. On this
2-core VM a server that sleeps between requests is charged ~30 µs a request for being
woken on an idle core, whatever it is written in; the busy pass leaves that out and shows
each server's own work. Servers, side by side in the same run:

- a Python loop of blocking ``recv`` and ``send`` answering each frame with 16 bytes (the
  kernel's loopback TCP and CPython's floor: nothing is parsed),
- the same answer from a minimal asyncio ``Protocol`` (what an event loop adds),
- Headwater (``--flush never``, as bench/cost_growth.py runs it),
- librdkafka's mock broker (C, a process of its own), the peer of issue #27's cost rows.

The brokers get two requests: a Produce (v8, acks=1) of one 100-byte record, round robin
over the partitions; and a sessionless Fetch (v11, max_wait 0) naming every partition of
a topic with nothing to read, what librdkafka's consumer sends (it has no fetch sessions).
The echo servers get frames of the Produce's size.
"""
from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import struct
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder
from rich.console import Console
from tables import table

from headwater.testing import BrokerProcess, bench_arguments, bench_workdir, cpu_seconds, mock_cluster_process

PRODUCED, QUIET = "floor", "floor-quiet"
MOCK = "librdkafka mock (C)"
ANSWER = struct.pack(">i", 16) + bytes(16)   # the echo servers' answer: a size and 16 bytes
_SIZE = struct.Struct(">i")


def whole_frames(data: bytes) -> int:
    """How many frames ``data`` holds (an echo server never gets a split one: the client sends
    one frame and waits for its answer)."""
    count = pos = 0
    while pos + 4 <= len(data):
        pos += 4 + _SIZE.unpack_from(data, pos)[0]
        count += 1
    return count


def blocking_server(ready) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    ready.send(listener.getsockname()[1])
    while True:   # one connection at a time
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while data := conn.recv(1 << 16):
            conn.sendall(ANSWER * whole_frames(data))
        conn.close()


def asyncio_server(ready) -> None:
    class Echo(asyncio.Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            self.transport.write(ANSWER * whole_frames(data))

    async def serve() -> None:
        server = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", 0)
        ready.send(server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()
    asyncio.run(serve())


@contextmanager
def echo_process(serve: Callable) -> Iterator[tuple[int, str]]:
    """An echo server in a child process: (its pid, its address) until the block ends."""
    parent, child = multiprocessing.Pipe()
    process = multiprocessing.Process(target=serve, args=(child,), daemon=True)
    process.start()
    try:
        yield process.pid, f"127.0.0.1:{parent.recv()}"
    finally:
        process.kill()
        process.join()


def record_batch() -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    builder.append(0, int(time.time() * 1000), b"key", b"x" * 100, [])
    return bytes(builder.build())


def framed(message, version: int) -> bytes:
    message.API_VERSION = version
    message.with_header(correlation_id=1, client_id="request-floor")
    return bytes(message.encode(header=True, framed=True))


def produce_requests(partitions: int) -> list[bytes]:
    data = ProduceRequest.TopicProduceData
    return [framed(ProduceRequest(transactional_id=None, acks=1, timeout_ms=30000, topic_data=[data(
        name=PRODUCED, partition_data=[data.PartitionProduceData(index=p, records=record_batch())])]), 8)
        for p in range(partitions)]


def quiet_fetch(partitions: int) -> bytes:
    topic = FetchRequest.FetchTopic
    return framed(FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=52428800, isolation_level=1,
                               session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[], topics=[topic(
                                   topic=QUIET, partitions=[topic.FetchPartition(
                                       partition=p, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                                       partition_max_bytes=1048576) for p in range(partitions)])]), 11)


def create_topics(bootstrap: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})   # gone with the call, before the broker stops
    for topic in (PRODUCED, QUIET):   # one a request: a request may create at most 1,000 partitions
        admin.create_topics([NewTopic(topic, partitions)])[topic].result(120)


def _receive(sock: socket.socket) -> None:
    """One whole answer, whatever its size."""
    head = sock.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        raise ConnectionError("the server closed the connection")
    (size,) = _SIZE.unpack(head)
    while size:
        size -= len(sock.recv(min(size, 1 << 20)))


def spin() -> None:
    while True:
        pass


@contextmanager
def busy_core() -> Iterator[None]:
    """A process spinning on a core of its own for the block's length: the server's waits for
    its next request then wake a core that is running, not one that sleeps."""
    process = multiprocessing.Process(target=spin, daemon=True)
    process.start()
    try:
        yield
    finally:
        process.kill()
        process.join()


def per_request(pid: int, address: str, requests: list[bytes], count: int) -> tuple[float, float]:
    """The server's CPU and the client's round trip per request, µs, over ``count`` requests
    sent one at a time (after a tenth as many to warm up)."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(count // 10 + 1):
            sock.sendall(requests[i % len(requests)])
            _receive(sock)
        cpu, started = cpu_seconds(pid), time.perf_counter()
        for i in range(count):
            sock.sendall(requests[i % len(requests)])
            _receive(sock)
        return 1e6 * (cpu_seconds(pid) - cpu) / count, 1e6 * (time.perf_counter() - started) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20000, help="requests per row and pass (default %(default)s)")
    parser.add_argument("--partitions", type=int, default=100, help="the topics' partitions (default %(default)s)")
    args = bench_arguments(parser, smoke={"requests": 200, "partitions": 10})
    console = Console(stderr=True)
    produce, fetch = produce_requests(args.partitions), [quiet_fetch(args.partitions)]
    rows: list[dict] = []

    def measure(server: str, pid: int, address: str, requests: dict[str, list[bytes]]) -> None:
        for request, sent in requests.items():
            console.log(f"{server}: {request}")
            idle = per_request(pid, address, sent, args.requests)
            with busy_core():
                busy = per_request(pid, address, sent, args.requests)
            rows.append({"server": server, "request": request, "idle": idle, "busy": busy})

    frames = {f"a frame of {len(produce[0])} B": produce}
    for name, serve in (("Python socket, blocking", blocking_server), ("asyncio Protocol", asyncio_server)):
        with echo_process(serve) as (pid, address):
            measure(name, pid, address, frames)
    kafka = {"Produce, 1 record": produce, f"Fetch, {args.partitions} quiet partitions": fetch}
    with BrokerProcess(bench_workdir("request-floor") / "data", "--flush", "never") as broker:
        create_topics(broker.bootstrap, args.partitions)
        measure("Headwater", broker.proc.pid, broker.bootstrap, kafka)
    with mock_cluster_process({PRODUCED: args.partitions, QUIET: args.partitions}) as (pid, address):
        measure(MOCK, pid, address, kafka)

    mock = {row["request"]: row for row in rows if row["server"] == MOCK}

    def figures(row: dict, pass_: str) -> dict[str, str]:
        cpu, trip = row[pass_]
        theirs = mock[row["request"]][pass_][0] if row["request"] in mock else 0
        return {f"CPU µs/request, {pass_}": f"{cpu:,.1f}", f"× mock, {pass_}": f"{cpu / theirs:.1f}" if theirs else "–",
                f"round trip µs, {pass_}": f"{trip:,.1f}"}
    out = Console(width=220) if sys.stdout.isatty() else Console(width=220, color_system=None)
    out.print(table(f"One request at a time, {args.requests:,} a row and pass; idle: nothing else running, "
                    f"busy: a core kept busy (load {os.getloadavg()[0]:.1f})",
                    [{"server": r["server"], "request": r["request"], **figures(r, "idle"), **figures(r, "busy")}
                     for r in rows]))


if __name__ == "__main__":
    main()
