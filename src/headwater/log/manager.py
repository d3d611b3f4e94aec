"""The data directory: the topic catalog and the logs of every partition.

Layout (every name is spelled in layout.py)::

    <data_dir>/catalog.json            {"topics": {name: {"partitions": n, "configs": {overrides}, "id": uuid}},
                                        "deleting": {name: n}}
    <data_dir>/<topic>-<partition>/    one Log per partition (see partition.py)
    <data_dir>/<hex>.deleted/          a partition directory on its way out

The catalog is one small file replaced atomically (temp file, fsync, rename, fsync of the
directory), so topic names of any legal length fit. A topic exists once the catalog lists
it. Every change is written to the catalog before it is made in memory: a write that fails
(a full disk) changes nothing. Deleting a topic moves it to ``deleting`` in the catalog (the commit point), renames
and removes its partition directories, then drops it from ``deleting``; a restart finishes
any deletion it finds there. Partition directories left without a catalog entry by a
crash inside create_topic are wiped when a topic of that name is created again.
Each topic has a stable topic ID (a random UUID made at creation, kept in the catalog), as
Kafka's topic IDs: clients that address topics by ID (share consumers) find it again after
a restart, and a topic re-created under the same name gets a new one.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import re
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .cleaner import CleanerStats, LogCleaner
from .config import LogConfig
from .layout import CATALOG, DELETED, partition_dir, read_json, replace_atomically
from .offset_columns import OffsetColumns
from .partition import CHECKPOINT_INTERVAL_MS, Log, monotonic_ms
from .retention import enforce_retention

logger = logging.getLogger("headwater.log")
LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


class TopicExistsError(Exception):
    pass


class UnknownTopicError(Exception):
    pass


class InvalidTopicError(Exception):
    pass


class PartitionCountError(Exception):
    """A partition count a topic cannot take: partitions are only ever added."""


class PartitionLimitError(Exception):
    """Creating the partitions would take the broker past its limit of partitions."""


@dataclass
class Topic:
    name: str
    partitions: list[Log]
    configs: dict[str, str] = field(default_factory=dict)   # the overrides, as given
    config: LogConfig = field(default_factory=LogConfig)     # effective: defaults + overrides
    topic_id: uuid.UUID = field(default_factory=uuid.uuid4)
    # its partitions' offsets as arrays (a wide fetch's), attached by the manager to ``partitions``
    offsets: OffsetColumns = field(default_factory=OffsetColumns, compare=False, repr=False)


def validate_topic_name(name: str) -> None:
    if not isinstance(name, str) or not LEGAL_TOPIC_NAME.fullmatch(name) or name in (".", ".."):
        raise InvalidTopicError(f"illegal topic name {name!r}: use 1-249 of [a-zA-Z0-9._-], not '.' or '..'")


class LogManager:
    def __init__(self, data_dir: Path, defaults: LogConfig = LogConfig(), max_partitions: int | None = None,
                 checkpoint_interval_ms: int = CHECKPOINT_INTERVAL_MS, clock: Callable[[], int] = monotonic_ms):
        self.data_dir = Path(data_dir)
        self.checkpoint_interval_ms = checkpoint_interval_ms   # log.flush.offset.checkpoint.interval.ms
        self.clock = clock
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.defaults = defaults
        self.max_partitions = max_partitions   # over all topics; None: no limit
        self.topics: dict[str, Topic] = {}
        self.cleaner = LogCleaner()
        catalog = read_json(self.data_dir / CATALOG, {"topics": {}, "deleting": {}})
        self._deleting: dict[str, int] = catalog["deleting"]
        for name, partitions in list(self._deleting.items()):
            self._remove_partitions(name, partitions)
        for doomed in self.data_dir.glob("*" + DELETED):
            shutil.rmtree(doomed, ignore_errors=True)
        for name, meta in catalog["topics"].items():
            config = LogConfig.from_topic_configs(meta["configs"], defaults)
            logs = [self._open_log(self._partition_dir(name, p), config) for p in range(meta["partitions"])]
            topic_id = uuid.UUID(meta["id"]) if "id" in meta else uuid.uuid4()  # catalogs from before topic IDs
            self.topics[name] = Topic(name, logs, meta["configs"], config, topic_id)
            self.topics[name].offsets.attach(logs)
        if any("id" not in meta for meta in catalog["topics"].values()):
            self._write_catalog()
        if self._deleting:
            self._write_catalog(deleting={})
            self._deleting.clear()

    def _open_log(self, directory: Path, config: LogConfig) -> Log:
        return Log.open(directory, config, self.clock, self.checkpoint_interval_ms)

    def _partition_dir(self, topic: str, partition: int) -> Path:
        return partition_dir(self.data_dir, topic, partition)

    @property
    def partition_count(self) -> int:
        return sum(len(t.partitions) for t in self.topics.values())

    def check_partition_limit(self, partitions: int) -> None:
        """PartitionLimitError if ``partitions`` more would exceed the broker's limit."""
        if self.max_partitions is not None and self.partition_count + partitions > self.max_partitions:
            raise PartitionLimitError(f"{partitions} more partition(s) would exceed the broker's limit of "
                                      f"{self.max_partitions} (it has {self.partition_count}; max.partitions)")

    def _write_catalog(self, topics: dict[str, Topic] | None = None, deleting: dict[str, int] | None = None) -> None:
        """Write the catalog as it is in memory, or with ``topics`` / ``deleting`` as they are about to be."""
        topics = self.topics if topics is None else topics
        catalog = {"topics": {t.name: {"partitions": len(t.partitions), "configs": t.configs, "id": str(t.topic_id)}
                              for t in topics.values()},
                   "deleting": self._deleting if deleting is None else deleting}
        replace_atomically(self.data_dir / CATALOG, json.dumps(catalog, sort_keys=True, indent=1))

    def check_new_topic(self, name: str, partitions: int,
                        configs: dict[str, str] | None = None) -> tuple[dict[str, str], LogConfig]:
        """Everything create_topic checks, creating nothing (CreateTopics' validate_only): the
        overrides as they would be kept and the effective config, or the error a create raises."""
        validate_topic_name(name)
        if name in self.topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        if not isinstance(partitions, int) or partitions < 1:
            raise ValueError(f"number of partitions must be at least 1, got {partitions!r}")
        self.check_partition_limit(partitions)
        configs = {k: str(v) for k, v in (configs or {}).items() if v is not None}  # null: the default
        return configs, LogConfig.from_topic_configs(configs, self.defaults)

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> Topic:
        configs, config = self.check_new_topic(name, partitions, configs)
        logs: list[Log] = []
        try:
            self._open_new_partitions(name, range(partitions), config, logs)
            topic = Topic(name, logs, configs, config)
            # A name being deleted before a crash would have its new partitions removed at the next start.
            self._write_catalog({**self.topics, name: topic}, {k: v for k, v in self._deleting.items() if k != name})
        except BaseException:
            for log in logs:
                log.delete()
            self._remove_partitions(name, partitions)
            raise
        topic.offsets.attach(logs)
        self.topics[name] = topic
        self._deleting.pop(name, None)
        return topic

    def _open_new_partitions(self, name: str, numbers: range, config: LogConfig, logs: list[Log]) -> None:
        """Open empty logs for partitions ``numbers`` into ``logs`` (so a caller can undo a partial failure)."""
        for p in numbers:
            directory = self._partition_dir(name, p)
            shutil.rmtree(directory, ignore_errors=True)  # leftovers of a create that crashed
            logs.append(self._open_log(directory, config))

    def add_partitions(self, name: str, count: int, validate_only: bool = False) -> Topic:
        """Grow topic ``name`` to ``count`` partitions (CreatePartitions): existing partitions
        keep their records, so keys may now hash elsewhere, as in Kafka. A topic never shrinks."""
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        current = len(topic.partitions)
        if count <= current:
            raise PartitionCountError(f"topic {name!r} has {current} partition(s); the new count {count} "
                                      "must be higher")
        self.check_partition_limit(count - current)
        if validate_only:
            return topic
        added: list[Log] = []
        try:
            self._open_new_partitions(name, range(current, count), topic.config, added)
            self._write_catalog({**self.topics, name: dataclasses.replace(topic, partitions=topic.partitions + added)})
        except BaseException:
            for log in added:
                log.delete()
            raise
        topic.partitions = topic.partitions + added  # a new list: readers on other threads see old or new
        topic.offsets.attach(topic.partitions)
        return topic

    def delete_topic(self, name: str) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        remaining = {k: t for k, t in self.topics.items() if k != name}
        self._write_catalog(remaining, {**self._deleting, name: len(topic.partitions)})
        del self.topics[name]
        self._deleting[name] = len(topic.partitions)
        try:
            for log in topic.partitions:
                log.delete()
            self._write_catalog(deleting={k: v for k, v in self._deleting.items() if k != name})
        except OSError as exc:  # deleted all the same: the catalog lists it under "deleting" for a restart to finish
            logger.warning("topic %s is deleted, its files will be removed at the next start: %s", name, exc)
        else:
            del self._deleting[name]

    def _remove_partitions(self, name: str, partitions: int) -> None:
        for p in range(partitions):
            shutil.rmtree(self._partition_dir(name, p), ignore_errors=True)

    def alter_topic_configs(self, name: str, configs: dict[str, str | None], incremental: bool) -> Topic:
        """Change a topic's overrides: ``incremental`` sets/removes (None) the given ones
        (IncrementalAlterConfigs), otherwise they replace all overrides (AlterConfigs).
        Invalid input raises ValueError and changes nothing."""
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        overrides = dict(topic.configs) if incremental else {}
        for key, value in configs.items():
            if value is None:
                overrides.pop(key, None)
            else:
                overrides[key] = str(value)
        config = LogConfig.from_topic_configs(overrides, self.defaults)
        self._write_catalog({**self.topics, name: dataclasses.replace(topic, configs=overrides)})
        topic.configs, topic.config = overrides, config
        for log in topic.partitions:
            log.update_config(config)
        return topic

    def set_defaults(self, defaults: LogConfig) -> None:
        """New broker defaults of topic configs: each topic inherits them where it has no override."""
        self.defaults = defaults
        for topic in list(self.topics.values()):
            topic.config = LogConfig.from_topic_configs(topic.configs, defaults)
            for log in topic.partitions:
                log.update_config(topic.config)

    def _logs(self) -> list[Log]:
        return [log for topic in list(self.topics.values()) for log in topic.partitions]

    def enforce_retention(self, now_ms: int, moved: Callable[[str, int], None] = lambda topic, partition: None) -> int:
        """Delete the segments retention allows in every log; returns how many went. ``moved`` is
        told of each partition whose log start offset moved (from this thread)."""
        deleted = 0
        for topic in list(self.topics.values()):
            for partition, log in enumerate(topic.partitions):
                if count := enforce_retention(log, now_ms):
                    deleted += count
                    moved(topic.name, partition)
        return deleted

    def clean(self, now_ms: int) -> CleanerStats:
        """One log cleaner pass over every compacted log; safe to call from a background thread."""
        return self.cleaner.clean(self._logs(), now_ms)

    def topic_by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return next((t for t in self.topics.values() if t.topic_id == topic_id), None)

    def get_log(self, topic: str, partition: int) -> Log | None:
        t = self.topics.get(topic)
        if t is None or not 0 <= partition < len(t.partitions):
            return None
        return t.partitions[partition]

    def flush_all(self) -> None:
        for topic in self.topics.values():
            for log in topic.partitions:
                log.flush()

    def close(self) -> None:
        for log in self._logs():
            try:
                log.close()
            except OSError as exc:  # no clean-shutdown marker: the next start recovers this log
                logger.warning("cannot close %s cleanly: %s", log.directory, exc)
