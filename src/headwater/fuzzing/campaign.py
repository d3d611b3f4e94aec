"""A fuzzing campaign against a real broker process: mutated frames over many connections, in
batches; after each batch the broker must be alive, answer ApiVersions in time, and have
logged no internal error. Around the campaign: a canary topic checked byte for byte, real
clients round-tripping records throughout, and the broker's memory before and after."""
from __future__ import annotations

import asyncio
import io
import random
import struct
import time
from collections import Counter
from dataclasses import dataclass, field

from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.api_header import ResponseHeader
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import ApiVersionsRequest

from headwater.fuzzing.corpus import HOSTILE_TOPIC, TOPIC, encode_request, valid_requests
from headwater.fuzzing.mutations import Mutant, mutants
from headwater.fuzzing.witnesses import CANARY_TOPIC, ROUND_TRIP_TOPIC, Canary, LogScan, RoundTrip
from headwater.protocol.messages import Api, response_header_is_flexible
from headwater.testing import BrokerProcess

CANARY_PARTITIONS = 3
LIVENESS_TIMEOUT = 10.0  # a broker that does not answer ApiVersions within this has hung


@dataclass
class Finding:
    what: str
    mutation: str
    seed: str
    frame_hex: str


@dataclass
class CampaignReport:
    seed: int
    frames: int = 0
    answered: int = 0
    closed_by_broker: int = 0
    unanswered: int = 0
    liveness_checks: int = 0
    hung: bool = False
    crashed: bool = False
    tracebacks: int = 0
    internal_errors: int = 0
    canary_intact: bool = False
    canary_matches_ground_truth: bool = False
    round_trip_delivered: int = 0
    round_trip_lost: int = 0
    round_trip_in_order: bool = False
    round_trip_errors: list[str] = field(default_factory=list)
    rss_before: int = 0
    rss_after: int = 0
    seconds: float = 0.0
    mutations: Counter = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return (not self.hung and not self.crashed and not self.tracebacks and not self.internal_errors
                and self.canary_intact and self.canary_matches_ground_truth and not self.round_trip_lost
                and self.round_trip_in_order and self.round_trip_delivered > 0)


class Campaign:
    def __init__(self, broker: BrokerProcess, apis: dict[int, Api], seed: int, connections: int = 16,
                 batch: int = 1000, answer_timeout: float = 1.0, hostile_topic: str = HOSTILE_TOPIC):
        self.broker, self.apis, self.hostile_topic = broker, apis, hostile_topic
        self.host, self.port = "127.0.0.1", broker.port
        self.rng = random.Random(seed)
        self.report = CampaignReport(seed=seed)
        self.connections, self.batch, self.answer_timeout = connections, batch, answer_timeout
        self.log = LogScan(broker.log_file)
        self._sent_on: dict[int, Mutant] = {}  # client port -> the last frame sent on that connection

    # --- setup and the witnesses --------------------------------------------------------------

    def _create_topics(self) -> None:
        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        futures = admin.create_topics([NewTopic(TOPIC, 2, 1), NewTopic(CANARY_TOPIC, CANARY_PARTITIONS, 1),
                                       NewTopic(ROUND_TRIP_TOPIC, 1, 1), NewTopic(HOSTILE_TOPIC, 2, 1)])
        for future in futures.values():
            future.result(30)

    async def _fetch_raw(self, topic: str, partition: int) -> bytes:
        Fetch = FetchRequest[11]
        wanted = Fetch.FetchTopic.FetchPartition(partition=partition, current_leader_epoch=-1, fetch_offset=0,
                                                 log_start_offset=-1, partition_max_bytes=64 << 20)
        request = Fetch(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=64 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, topics=[Fetch.FetchTopic(topic=topic, partitions=[wanted])],
                        forgotten_topics_data=[], rack_id="")
        response = await self._call(request, 11)
        return bytes(response.responses[0].partitions[0].records or b"")

    async def _call(self, request, version: int, timeout: float = LIVENESS_TIMEOUT):
        """Send one request object on a fresh connection; return its decoded response."""
        reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), timeout)
        try:
            frame = encode_request(request, version)
            writer.write(struct.pack(">i", len(frame)) + frame)
            await writer.drain()
            (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), timeout))
            body = io.BytesIO(await asyncio.wait_for(reader.readexactly(size), timeout))
            spec = self.apis[type(request).API_KEY]
            ResponseHeader.decode(body, flexible=response_header_is_flexible(spec, version))
            return spec.response.decode(body.read(), version=version)
        finally:
            writer.close()

    async def _alive(self) -> bool:
        self.report.liveness_checks += 1
        if self.broker.proc.poll() is not None:
            self.report.crashed = True
            return False
        try:
            await self._call(ApiVersionsRequest[3](client_software_name="fuzz-liveness",
                                                   client_software_version="1"), 3)
        except (asyncio.TimeoutError, OSError, asyncio.IncompleteReadError):
            self.report.crashed = self.broker.proc.poll() is not None
            self.report.hung = not self.report.crashed
            return False
        return True

    # --- sending --------------------------------------------------------------------------------

    async def _connection(self, frames) -> None:
        """One client connection: send a frame, await its answer, reconnect when the broker hangs up."""
        report, reader, writer = self.report, None, None
        for mutant in frames:
            if writer is None:
                try:
                    reader, writer = await asyncio.open_connection(self.host, self.port)
                except OSError:
                    return  # the broker is gone: the liveness check after the batch says so
                port = writer.get_extra_info("sockname")[1]
            report.frames += 1
            report.mutations[mutant.mutation] += 1
            self._sent_on[port] = mutant
            try:
                writer.write(mutant.wire)
                await writer.drain()
                if mutant.answerable:
                    (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), self.answer_timeout))
                    await asyncio.wait_for(reader.readexactly(size), self.answer_timeout)
                    report.answered += 1
                    if not mutant.desyncs:
                        continue
                else:
                    report.unanswered += 1
            except (asyncio.IncompleteReadError, ConnectionError):
                report.closed_by_broker += 1
            except asyncio.TimeoutError:
                report.unanswered += 1
            writer.close()
            reader = writer = None
        if writer is not None:
            writer.close()

    async def _batch(self, stream, size: int) -> None:
        frames = (next(stream) for _ in range(size))
        await asyncio.gather(*(self._connection(frames) for _ in range(self.connections)))

    def _record_findings(self, ports: list[int]) -> None:
        for port in ports:
            mutant = self._sent_on.get(port)
            if mutant is not None and len(self.report.findings) < 20:
                self.report.findings.append(Finding("internal error", mutant.mutation, mutant.seed, mutant.wire.hex()))

    # --- the whole run -------------------------------------------------------------------------

    async def run(self, frames: int) -> CampaignReport:
        report = self.report
        started = time.monotonic()
        self._create_topics()
        canary = Canary(self.broker.bootstrap, CANARY_PARTITIONS)
        canary.write()
        before = [await self._fetch_raw(CANARY_TOPIC, p) for p in range(CANARY_PARTITIONS)]
        round_trip = RoundTrip(self.broker.bootstrap)
        round_trip.start()
        report.rss_before = self.broker.rss_bytes()
        stream = mutants(self.rng, valid_requests(self.apis), self.hostile_topic)
        sent = 0
        while sent < frames:
            size = min(self.batch, frames - sent)
            await self._batch(stream, size)
            sent += size
            self._record_findings(self.log.scan())
            if not await self._alive():
                break
        alive = not (report.hung or report.crashed)
        report.rss_after = self.broker.rss_bytes() if alive else 0
        round_trip.stop()
        report.round_trip_delivered = len(round_trip.delivered)
        report.round_trip_lost, report.round_trip_in_order = round_trip.lost, round_trip.in_order
        report.round_trip_errors = round_trip.errors[:10]
        if alive:
            after = [await self._fetch_raw(CANARY_TOPIC, p) for p in range(CANARY_PARTITIONS)]
            report.canary_intact = after == before
            report.canary_matches_ground_truth = [Canary.records_of(raw) for raw in after] == canary.ground_truth()
        self._record_findings(self.log.scan())
        report.tracebacks, report.internal_errors = self.log.tracebacks, self.log.internal_errors
        report.seconds = time.monotonic() - started
        return report
