"""A push subscription: consume a topic as a consumer group, POST each record to an endpoint.

A 2xx answer acknowledges the record; any other answer, a refused connection or a timeout
is retried after a backoff; after `max_attempts` the record goes to the dead-letter topic
with the reason. Offsets are committed only past finished records (`progress`). At most
`max_in_flight` records are outstanding at once: when the endpoint is slow, the subscription
stops taking records (backpressure) and the backlog waits, durable, in the log.
With ordering "key", records of one key are delivered one at a time in offset order.
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
        self._last_of_key: dict[tuple[str, int, bytes | None], asyncio.Task] = {}  # ordering "key": its latest record
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
        while True:
            for message in await self._call(self._consumer.consume, 100, POLL_TIMEOUT):
                if message.error():
                    log.warning("consumer: %s", message.error())
                    continue
                await self._slots.acquire()  # backpressure: no more than max_in_flight outstanding
                self._dispatch(http, _record(message))

    def _dispatch(self, http: aiohttp.ClientSession, record: Record) -> None:
        self.progress.taken(record.topic, record.partition, record.offset)
        key = (record.topic, record.partition, record.key)  # Kafka orders within a partition
        after = self._last_of_key.get(key) if self.config.ordering == "key" else None
        task = asyncio.create_task(self._deliver(http, record, after))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if self.config.ordering == "key":
            self._last_of_key[key] = task
            task.add_done_callback(lambda t: self._key_done(key, t))

    def _key_done(self, key: tuple[str, int, bytes | None], task: asyncio.Task) -> None:
        if self._last_of_key.get(key) is task:  # nothing of this key waits behind it
            del self._last_of_key[key]

    async def _deliver(self, http: aiohttp.ClientSession, record: Record, after: asyncio.Task | None) -> None:
        try:
            if after is not None:
                await asyncio.wait([after])  # the key's previous record first
            reason = ""
            for attempt in range(1, self.config.max_attempts + 1):
                if attempt > 1:
                    await asyncio.sleep(self.config.backoff.delay(attempt - 1))
                reason = await self._attempt(http, record, attempt)
                if not reason:
                    self.acknowledged += 1
                    break
            else:
                await self._dead_letter(record, reason)
            self.progress.finished(record.topic, record.partition, record.offset)
        except Exception:
            log.exception("delivery of %s-%d@%d failed; it stays uncommitted", record.topic, record.partition,
                          record.offset)
        finally:
            self._slots.release()

    async def _attempt(self, http: aiohttp.ClientSession, record: Record, attempt: int) -> str:
        """One POST; "" when acknowledged, else why not."""
        payload = envelope.body(record, attempt)
        try:
            async with http.post(self.config.endpoint, data=payload,
                                 headers=envelope.headers(record, attempt, payload, self.config.secret)) as answer:
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

    async def _call(self, fn, *args, **kwargs):
        return await asyncio.get_running_loop().run_in_executor(self._consumer_thread, lambda: fn(*args, **kwargs))


def _record(message: Message) -> Record:
    _kind, timestamp = message.timestamp()
    return Record(message.topic(), message.partition(), message.offset(), timestamp if timestamp > 0 else None,
                  message.key(), message.value(), tuple(message.headers() or ()))
