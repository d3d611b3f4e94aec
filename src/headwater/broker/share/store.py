"""Share-group state, kept in the broker's own log so a restart neither loses a record nor
completes one that was never acknowledged.

The internal topic ``__share_group_state`` (one partition, compacted) holds one record per
share-partition, rewritten whenever its delivery state changes, and one per group's configs:

    key   {"group": G, "type": "partition", "topic": T, "partition": P}
    value {"start": SPSO, "end": SPEO, "records": [[offset, state, delivery count], ...],
           "archived": N, "dead_lettered": N}

    key   {"group": G, "type": "config"}
    value {name: value, ...}

DeleteGroups writes tombstones (null values) for a group's keys. Replayed at start: acknowledged and archived records stay done, acquired ones become
available again (their locks died with the broker) keeping their delivery counts.
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator

from headwater.broker.appender import Append
from headwater.log import LogManager
from headwater.broker.internal_topic import replay
from headwater.records import Record, encode_batch

from .partition import InFlight, RecordState, SharePartition

log = logging.getLogger("headwater.share")

STATE_TOPIC = "__share_group_state"
TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(100 << 20)}


def _json(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


class ShareStateStore:
    def __init__(self, logs: LogManager, append: Append, fsync_each_write: bool):
        self.logs, self._append, self._fsync_each_write = logs, append, fsync_each_write
        if STATE_TOPIC not in logs.topics:
            logs.create_topic(STATE_TOPIC, 1, TOPIC_CONFIGS)

    def _write(self, key: dict, value: dict | None, *more: tuple[dict, None]) -> bool:
        now = int(time.time() * 1000)
        batch = encode_batch([Record(i, now, _json(k), None if v is None else _json(v))
                              for i, (k, v) in enumerate([(key, value), *more])])
        result = self._append(STATE_TOPIC, 0, batch)
        if result.error:
            log.error("cannot write to %s: %s %s", STATE_TOPIC, result.error.name, result.message or "")
            return False
        if self._fsync_each_write:
            self.logs.get_log(STATE_TOPIC, 0).flush()
        return True

    def save_partition(self, group_id: str, topic: str, partition: int, sp: SharePartition) -> bool:
        records = [[o, int(r.state), r.delivery_count] for o, r in sorted(sp.records.items())
                   if r.state != RecordState.AVAILABLE or r.delivery_count]
        return self._write({"group": group_id, "type": "partition", "topic": topic, "partition": partition},
                           {"start": sp.start_offset, "end": sp.end_offset, "records": records,
                            "archived": sp.archived_total, "dead_lettered": sp.dead_lettered})

    def save_configs(self, group_id: str, overrides: dict[str, str]) -> bool:
        return self._write({"group": group_id, "type": "config"}, overrides)

    def forget(self, group_id: str, partitions: list[tuple[str, int]], configs: bool = True) -> bool:
        """Tombstones for share-partitions of a group (a deleted topic), and its configs (a deleted group)."""
        keys = [{"group": group_id, "type": "partition", "topic": t, "partition": p} for t, p in partitions]
        if configs:
            keys.append({"group": group_id, "type": "config"})
        return not keys or self._write(keys[0], None, *[(key, None) for key in keys[1:]])

    def load(self) -> tuple[dict[tuple[str, str, int], dict], dict[str, dict[str, str]]]:
        """(share-partition states by (group, topic, partition), configs by group): the last record of each key."""
        partitions, configs = {}, {}
        for key, value in self._records():
            if key["type"] == "partition":
                where = (key["group"], key["topic"], int(key["partition"]))
                if value is None:
                    partitions.pop(where, None)
                else:
                    partitions[where] = value
            elif key["type"] == "config":
                if value is None:
                    configs.pop(key["group"], None)
                else:
                    configs[key["group"]] = {str(k): str(v) for k, v in value.items()}
        return partitions, configs

    def _records(self) -> Iterator[tuple[dict, dict | None]]:
        for record in replay(self.logs.get_log(STATE_TOPIC, 0), STATE_TOPIC):
            try:
                yield json.loads(record.key), None if record.value is None else json.loads(record.value)
            except (TypeError, ValueError) as exc:
                log.warning("skipping unreadable record at offset %d of %s: %r", record.offset, STATE_TOPIC, exc)


def restore(sp: SharePartition, state: dict) -> None:
    """Put a replayed state into a fresh share-partition: acquired records are available again."""
    sp.start_offset, sp.end_offset = int(state["start"]), int(state["end"])
    sp.archived_total, sp.dead_lettered = int(state["archived"]), int(state["dead_lettered"])
    sp.records = {o: InFlight() for o in range(sp.start_offset, sp.end_offset)}
    for offset, state_value, count in state["records"]:
        done = RecordState(state_value) in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
        sp.records[int(offset)] = InFlight(RecordState(state_value) if done else RecordState.AVAILABLE, int(count))
