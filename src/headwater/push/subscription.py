"""A push subscription: consume a topic as a consumer group, POST each record to an endpoint.

A 2xx answer acknowledges the record; any other answer, a refused connection or a timeout
is retried after a backoff; after `max_attempts` the record goes to the dead-letter topic
with the reason. Offsets are committed only past finished records (`progress`). At most
`max_in_flight` records are outstanding at once: when the endpoint is slow, the subscription
stops taking records (backpressure) and the backlog waits, durable, in the log.
With ordering "key", records of one key are delivered one at a time in offset order.

With `batch_size` > 1 one POST carries a batch of one partition's records (`batching`), a 2xx
acknowledges them all, `max_in_flight` counts batches, and a batch that fails `batch_attempts`
times is delivered record by record, each as above, so only the records that keep failing are
dead-lettered. With ordering "key" a batch waits for the batches before it holding its keys.
"""
from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import aiohttp
from confluent_kafka import Consumer, Message, Producer, TopicPartition

from headwater.push import envelope
from headwater.push.batching import OpenBatches
from headwater.push.envelope import Record
from headwater.push.progress import Progress
from headwater.push.retry import Backoff
from headwater.waiting import PROBE_TIMEOUT, STOP_CHECK, Stopped, client_log, never, wait_for_broker

log = logging.getLogger(__name__)

COMMIT_INTERVAL = 1.0  # seconds between commits of finished records
POLL_TIMEOUT = 0.2     # seconds one consume call may wait for records
DLQ_REASON = "headwater.push.reason"  # dead letters carry the reason and the record's origin in these headers
DLQ_ORIGIN = ("headwater.push.topic", "headwater.push.partition", "headwater.push.offset")
DLQ_ATTEMPTS = "headwater.push.attempts"


@dataclass(frozen=True)
class PushConfig:
    bootstrap: str
    topic: str
    group: str
    endpoint: str
    dead_letter_topic: str
    secret: bytes | None = None
    max_attempts: int = 10
    max_in_flight: int = 16
    ordering: str = "none"        # "none": parallel; "key": one at a time per key
    batch_size: int = 1           # records per POST; 1: one JSON object per POST, more: JSON arrays
    batch_wait: float = 0.05      # seconds a batch may wait to fill up
    batch_attempts: int = 3       # failures of a whole batch before its records go one by one
    timeout: float = 10.0         # seconds for one HTTP attempt
    backoff: Backoff = field(default_factory=Backoff)
    from_beginning: bool = False  # where a group without committed offsets starts
    consumer_config: dict[str, str] = field(default_factory=dict)  # librdkafka consumer properties
    security: dict[str, str] = field(default_factory=dict)  # librdkafka properties of both clients: sasl.*, ssl.*


class PushSubscription:
    def __init__(self, config: PushConfig):
        self.config = config
        self.progress = Progress()
        # The consumer lives on one thread of its own: librdkafka calls block.
        self._consumer_thread = ThreadPoolExecutor(1, thread_name_prefix="push-consumer")
        self._consumer = Consumer({
            "bootstrap.servers": config.bootstrap, **config.security, "group.id": config.group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest" if config.from_beginning else "latest", "log_level": 3,
            "logger": client_log, **config.consumer_config})
        self._producer = Producer({"bootstrap.servers": config.bootstrap, **config.security, "acks": "all",
                                   "log_level": 3, "logger": client_log})
        self._slots = asyncio.Semaphore(config.max_in_flight)
        self._open = OpenBatches(config.batch_size, config.batch_wait)
        self._last_of_key: dict[tuple[str, int, bytes | None], asyncio.Task] = {}  # ordering "key": its latest batch
        self._tasks: set[asyncio.Task] = set()
        self._main: asyncio.Task | None = None
        self.acknowledged = 0
        self.dead_lettered = 0

    def stop(self) -> None:
        """Stop taking records; outstanding deliveries are abandoned (uncommitted: delivered again later)."""
        if self._main is not None:
            self._main.cancel()

    async def run(self, should_stop: Callable[[], bool] = never) -> None:
        """Deliver until `stop()` or `should_stop()`; then commit what is finished and leave the
        group. While the broker is down it waits (and says so, once)."""
        self._main = asyncio.current_task()
        watcher = asyncio.create_task(self._stop_when(should_stop))
        committer = asyncio.create_task(self._commit_periodically())
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.config.timeout),
                                         connector=aiohttp.TCPConnector(limit=self.config.max_in_flight)) as http:
            try:
                await self._call(wait_for_broker, lambda: self._consumer.list_topics(timeout=PROBE_TIMEOUT),
                                 self.config.bootstrap, should_stop, log.warning)
                await self._take_records(http)
            except (asyncio.CancelledError, Stopped):
                pass
            finally:
                for task in self._tasks:
                    task.cancel()
                await asyncio.gather(*self._tasks, return_exceptions=True)
                committer.cancel()
                watcher.cancel()
                await self._commit()
                await self._call(self._consumer.close)
                self._consumer_thread.shutdown()
        log.info("push stopped: %d acknowledged, %d dead-lettered", self.acknowledged, self.dead_lettered)

    async def _stop_when(self, should_stop: Callable[[], bool]) -> None:
        while not should_stop():
            await asyncio.sleep(STOP_CHECK)
        self.stop()

    async def _take_records(self, http: aiohttp.ClientSession) -> None:
        await self._call(self._consumer.subscribe, [self.config.topic], on_revoke=self._revoked)
        take = max(100, self.config.batch_size)
        while True:
            wait = self._open.seconds_to_next()
            messages = await self._call(self._consumer.consume, take, POLL_TIMEOUT if wait is None
                                        else min(POLL_TIMEOUT, wait))
            for message in messages:
                if message.error():
                    log.warning("consumer: %s", message.error())
                    continue
                record = _record(message)
                self.progress.taken(record.topic, record.partition, record.offset)
                full = self._open.add(record)
                if full is not None:
                    await self._dispatch(http, full)
            for batch in self._open.due():
                await self._dispatch(http, batch)

    async def _dispatch(self, http: aiohttp.ClientSession, records: list[Record]) -> None:
        await self._slots.acquire()  # backpressure: no more than max_in_flight outstanding
        first = records[0]
        keys = {(first.topic, first.partition, r.key) for r in records}  # Kafka orders within a partition
        after = [self._last_of_key[k] for k in keys if k in self._last_of_key] if self.config.ordering == "key" else []
        task = asyncio.create_task(self._deliver(http, records, after))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if self.config.ordering == "key":
            for key in keys:
                self._last_of_key[key] = task
            task.add_done_callback(lambda t: self._keys_done(keys, t))

    def _keys_done(self, keys: set[tuple[str, int, bytes | None]], task: asyncio.Task) -> None:
        for key in keys:
            if self._last_of_key.get(key) is task:  # nothing of this key waits behind it
                del self._last_of_key[key]

    async def _deliver(self, http: aiohttp.ClientSession, records: list[Record], after: list[asyncio.Task]) -> None:
        first = records[0]
        try:
            if after:
                await asyncio.wait(after)  # the keys' previous records first
            if self.config.batch_size == 1:
                await self._deliver_alone(http, first)
            elif not await self._deliver_batch(http, records):
                await self._deliver_one_by_one(http, records)
        except Exception:
            log.exception("delivery of %s-%d@%d (%d records) failed; it stays uncommitted", first.topic,
                          first.partition, first.offset, len(records))
        finally:
            self._slots.release()

    async def _deliver_alone(self, http: aiohttp.ClientSession, record: Record) -> None:
        """One record, one JSON object per POST: retried, then dead-lettered."""
        def request(attempt: int) -> tuple[bytes, dict[str, str]]:
            payload = envelope.body(record, attempt)
            return payload, envelope.headers(record, attempt, payload, self.config.secret)
        reason = await self._retried(http, self.config.max_attempts, request)
        if reason:
            await self._dead_letter(record, reason)
        else:
            self.acknowledged += 1
        self.progress.finished(record.topic, record.partition, record.offset)

    async def _deliver_batch(self, http: aiohttp.ClientSession, records: list[Record]) -> bool:
        """The batch as one JSON array per POST, retried; False when it kept failing."""
        def request(attempt: int) -> tuple[bytes, dict[str, str]]:
            payload = envelope.batch_body(records, attempt)
            return payload, envelope.batch_headers(records, attempt, payload, self.config.secret)
        first = records[0]
        reason = await self._retried(http, self.config.batch_attempts, request)
        if not reason:
            self.acknowledged += len(records)
            self.progress.finished(first.topic, first.partition, *(r.offset for r in records))
            return True
        log.info("batch %s-%d@%d of %d failed %d times (%s): its records go one by one", first.topic,
                 first.partition, first.offset, len(records), self.config.batch_attempts, reason)
        return False

    async def _retried(self, http: aiohttp.ClientSession, attempts: int,
                       request: Callable[[int], tuple[bytes, dict[str, str]]]) -> str:
        """POST up to `attempts` times, backing off between; "" once acknowledged, else the last reason."""
        reason = ""
        for attempt in range(1, attempts + 1):
            if attempt > 1:
                await asyncio.sleep(self.config.backoff.delay(attempt - 1))
            reason = await self._post(http, *request(attempt))
            if not reason:
                return ""
        return reason

    async def _deliver_one_by_one(self, http: aiohttp.ClientSession, records: list[Record]) -> None:
        """A failed batch's records alone, so only those that keep failing are dead-lettered: records
        of one key in offset order (ordering "key"), the rest in parallel."""
        chains: dict[object, list[Record]] = {}
        for i, record in enumerate(records):
            chains.setdefault(record.key if self.config.ordering == "key" else i, []).append(record)

        async def in_order(chain: list[Record]) -> None:
            for record in chain:
                await self._deliver_alone(http, record)
        results = await asyncio.gather(*(in_order(chain) for chain in chains.values()), return_exceptions=True)
        failed = [result for result in results if isinstance(result, BaseException)]
        if failed:
            raise failed[0]

    async def _post(self, http: aiohttp.ClientSession, payload: bytes, headers: dict[str, str]) -> str:
        """One POST; "" when acknowledged, else why not."""
        try:
            async with http.post(self.config.endpoint, data=payload, headers=headers) as answer:
                await answer.read()
                return "" if 200 <= answer.status < 300 else f"HTTP {answer.status}"
        except asyncio.TimeoutError:
            return f"no answer within {self.config.timeout:g} s"
        except aiohttp.ClientError as exc:
            return f"{type(exc).__name__}: {exc}"

    async def _dead_letter(self, record: Record, reason: str) -> None:
        log.warning("%s-%d@%d dead-lettered after %d attempts: %s", record.topic, record.partition, record.offset,
                    self.config.max_attempts, reason)
        headers = [*record.headers, (DLQ_REASON, reason.encode()),
                   *zip(DLQ_ORIGIN, (record.topic.encode(), b"%d" % record.partition, b"%d" % record.offset)),
                   (DLQ_ATTEMPTS, b"%d" % self.config.max_attempts)]
        loop = asyncio.get_running_loop()
        written = loop.create_future()

        def delivered(err, _msg):
            loop.call_soon_threadsafe(lambda: written.done() or (
                written.set_exception(RuntimeError(str(err))) if err else written.set_result(None)))
        self._producer.produce(self.config.dead_letter_topic, key=record.key, value=record.value,
                               headers=headers, on_delivery=delivered)
        while not written.done():  # the producer reports deliveries from poll()
            await loop.run_in_executor(None, self._producer.poll, 0.1)
        await written
        self.dead_lettered += 1

    async def _commit_periodically(self) -> None:
        while True:
            await asyncio.sleep(COMMIT_INTERVAL)
            await self._commit()

    async def _commit(self) -> None:
        offsets = self.progress.take_commits()
        if offsets:
            await self._call(self._commit_offsets, offsets)

    def _commit_offsets(self, offsets: dict[tuple[str, int], int]) -> None:
        try:
            self._consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                                  asynchronous=False)
        except Exception as exc:  # a later commit covers these offsets again
            log.warning("commit failed: %s", exc)

    def _revoked(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """On the consumer thread, before another member takes these partitions: commit what is
        finished; what is still outstanding the new owner delivers again (at least once)."""
        revoked = {(tp.topic, tp.partition) for tp in partitions}
        offsets = self.progress.take_commits(revoked)
        if offsets:
            self._commit_offsets(offsets)
        self.progress.forget(revoked)
        self._open.drop(revoked)  # safe here: the loop only touches it between consume calls

    async def _call(self, fn, *args, **kwargs):
        return await asyncio.get_running_loop().run_in_executor(self._consumer_thread, lambda: fn(*args, **kwargs))


def _record(message: Message) -> Record:
    _kind, timestamp = message.timestamp()
    return Record(message.topic(), message.partition(), message.offset(), timestamp if timestamp > 0 else None,
                  message.key(), message.value(), tuple(message.headers() or ()))
