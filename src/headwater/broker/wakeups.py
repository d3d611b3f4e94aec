"""Partition growth signals: a long-polling fetch sleeps on these instead of polling the log."""
from __future__ import annotations

import asyncio
from collections.abc import Iterable

Partition = tuple[str, int]


class Watch:
    """A long-lived watcher of many partitions (a fetch session, or one full fetch): which of them
    changed since it last looked, and the future of the fetch waiting on them, if one waits.

    Registered once per partition, not once per fetch, so an idle consumer's fetch on thousands
    of partitions costs the broker one future, whatever the number of partitions."""
    __slots__ = ("changed", "waiter")

    def __init__(self) -> None:
        self.changed: set[Partition] = set()
        self.waiter: asyncio.Future | None = None

    def take_changed(self) -> set[Partition]:
        changed, self.changed = self.changed, set()
        return changed

    def arm(self) -> None:
        """A fresh waiter, made before reading the logs, or after the read with nothing awaited in
        between (every notify runs on the loop's thread): a change after the read still wakes it."""
        self.waiter = asyncio.get_running_loop().create_future()

    async def wait(self, timeout: float) -> bool:
        """Until a watched partition changes (True) or ``timeout`` seconds pass (False)."""
        try:
            await asyncio.wait_for(self.waiter, timeout)
            return True
        except TimeoutError:
            return False

    def wake(self, partition: Partition) -> None:
        self.changed.add(partition)
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


class GrowthSignals:
    """Who is told when a partition grows: the Watches registered on it, those of fetch sessions
    for as long as the session lives, and those of single waits (``watch``: a fetch without a
    session, a share fetch, the console's live tail) for the wait.

    What this holds is bounded by the sessions and waits there are now, never by the names
    clients have ever asked about.
    """

    def __init__(self) -> None:
        self._watches: dict[Partition, set[Watch]] = {}   # the Watches registered on each partition
        self._topic_watches: dict[str, set[Watch]] = {}   # those registered on every partition of a topic

    def __len__(self) -> int:
        """Partitions and whole topics watched now (none once nothing watches)."""
        return len(self._watches) + len(self._topic_watches)

    def watch(self, partitions: list[Partition], topics: Iterable[str] = ()) -> _WatchBlock:
        """A Watch on ``partitions`` and on every partition of ``topics`` for the block, armed: read
        the logs, then ``wait`` on it (an append between the read and the wait still wakes it).
        A wait on thousands of partitions of one topic (librdkafka's fetch names them all) is one
        registration on the topic, not one per partition."""
        return _WatchBlock(self, partitions, list(topics))

    def watch_topics(self, watch: Watch, topics: list[str]) -> None:
        for topic in topics:
            self._topic_watches.setdefault(topic, set()).add(watch)

    def unwatch_topics(self, watch: Watch, topics: list[str]) -> None:
        for topic in topics:
            watchers = self._topic_watches[topic]
            watchers.discard(watch)
            if not watchers:
                del self._topic_watches[topic]

    def register(self, watch: Watch, partitions: Iterable[Partition]) -> None:
        watches = self._watches
        for p in partitions:
            watchers = watches.get(p)
            if watchers is None:
                watches[p] = {watch}
            else:
                watchers.add(watch)

    def unregister(self, watch: Watch, partitions: Iterable[Partition]) -> None:
        watches = self._watches
        for p in partitions:
            watchers = watches.get(p)
            if watchers is not None:
                watchers.discard(watch)
                if not watchers:
                    del watches[p]

    def notify(self, topic: str, partition: int) -> None:
        """``partition`` grew, or its offsets (log start, last stable) or existence changed."""
        key = (topic, partition)
        for watch in self._watches.get(key, ()):
            watch.wake(key)
        for watch in self._topic_watches.get(topic, ()):
            watch.wake(key)

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self._watches if k[0] == topic]:
            self.notify(*key)
        for watch in self._topic_watches.get(topic, ()):
            watch.wake((topic, -1))


class _WatchBlock:
    """``GrowthSignals.watch``'s block. A class, not a generator's context manager: every waiting
    fetch without a session takes one, and the generator's frames cost a few µs of it."""
    __slots__ = ("signals", "watch", "partitions", "topics")

    def __init__(self, signals: GrowthSignals, partitions: list[Partition], topics: list[str]) -> None:
        self.signals, self.watch, self.partitions, self.topics = signals, Watch(), partitions, topics

    def __enter__(self) -> Watch:
        self.signals.register(self.watch, self.partitions)
        self.signals.watch_topics(self.watch, self.topics)
        self.watch.arm()
        return self.watch

    def __exit__(self, *exc) -> None:
        self.signals.unregister(self.watch, self.partitions)
        self.signals.unwatch_topics(self.watch, self.topics)
