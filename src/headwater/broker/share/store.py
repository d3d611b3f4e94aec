"""Share-group state, kept in the broker's own log so a restart neither loses a record nor
completes one that was never acknowledged.

The internal topic ``__share_group_state`` (one partition, compacted) holds one record per
share-partition, rewritten whenever its delivery state changes, and one per group's configs:

    key   {"group": G, "type": "partition", "topic": T, "partition": P}
    value {"start": SPSO, "end": SPEO, "ranges": [[first offset, last offset, state, delivery count], ...],
           "archived": N, "dead_lettered": N}

(``ranges``: runs of consecutive offsets in one state with one delivery count, so a state
record grows with the runs, not the records in flight. Older states have ``records``,
[[offset, state, delivery count], ...]; both are read.)

    key   {"group": G, "type": "config"}
    value {name: value, ...}

DeleteGroups writes tombstones (null values) for a group's keys. Replayed at start: acknowledged and archived records stay done, acquired ones become
available again (their locks died with the broker) keeping their delivery counts.
"""
from __future__ import annotations

from collections.abc import Awaitable
from functools import lru_cache

import orjson

from headwater.broker.appender import Appender
from headwater.broker.clock import Clock
from headwater.broker.fsync_rounds import settled
from headwater.broker.internal_topic import InternalTopic, json_bytes
from headwater.protocol.errors import ErrorCode

from .partition import RecordState, SharePartition
from .state_records import STATE_TOPIC


class ShareStateStore:
    def __init__(self, appender: Appender, clock: Clock):
        self._topic = InternalTopic(STATE_TOPIC, appender, clock)

    def _write(self, pairs: list[tuple[bytes, bytes | None]]) -> bool:
        """One batch of (key, value or None for a tombstone) records; False if it is not written."""
        return self._topic.write(pairs) == ErrorCode.NONE

    def save_partition(self, group_id: str, topic: str, partition: int, sp: SharePartition) -> bool:
        return self._write([_partition_record(group_id, topic, partition, sp)])

    def save_partitions(self, group_id: str, partitions: dict[tuple[str, int], SharePartition],
                        durable: bool) -> Awaitable[ErrorCode]:
        """One record per share-partition, in one batch, written at the call: its fsync by the
        broker's group commit started if ``durable`` (await it), else left for the next fsync."""
        pairs = [_partition_record(group_id, topic, partition, sp) for (topic, partition), sp in partitions.items()]
        return self._topic.write_durably(pairs) if durable else settled(self._topic.write_unsynced(pairs))

    def save_configs(self, group_id: str, overrides: dict[str, str]) -> bool:
        return self._write([(_config_key(group_id), json_bytes(overrides))])

    def forget(self, group_id: str, partitions: list[tuple[str, int]], configs: bool = True) -> bool:
        """Tombstones for share-partitions of a group (a deleted topic), and its configs (a deleted group)."""
        keys = [_partition_key(group_id, t, p) for t, p in partitions]
        if configs:
            keys.append(_config_key(group_id))
        return not keys or self._write([(key, None) for key in keys])

    def load(self) -> tuple[dict[tuple[str, str, int], dict], dict[str, dict[str, str]]]:
        """(share-partition states by (group, topic, partition), configs by group): the last record of each key."""
        partitions, configs = {}, {}

        def apply(key: dict, value: dict | None) -> None:
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
        self._topic.replay(apply)
        return partitions, configs


def _partition_record(group_id: str, topic: str, partition: int, sp: SharePartition) -> tuple[bytes, bytes]:
    """A share-partition's state record, written at every change (one a ShareFetch): the key's
    bytes made once, the value by orjson (only keys are compared as bytes, by compaction)."""
    return _partition_key(group_id, topic, partition), orjson.dumps(_partition_value(sp))


@lru_cache(maxsize=4096)
def _partition_key(group_id: str, topic: str, partition: int) -> bytes:
    return json_bytes({"group": group_id, "type": "partition", "topic": topic, "partition": partition})


def _config_key(group_id: str) -> bytes:
    return json_bytes({"group": group_id, "type": "config"})


def _partition_value(sp: SharePartition) -> dict:
    """The share-partition's runs as persisted ranges: runs apart only by their acquisition join,
    and never-delivered available ones (the default) are left out."""
    ranges: list[list[int]] = []
    for run in sp.runs:
        state, count = int(run.state), run.delivery_count
        if state == RecordState.AVAILABLE and not count:
            continue
        last = ranges[-1] if ranges else None
        if last and last[1] == run.first - 1 and last[2] == state and last[3] == count:
            last[1] = run.last
        else:
            ranges.append([run.first, run.last, state, count])
    return {"start": sp.start_offset, "end": sp.end_offset, "ranges": ranges,
            "archived": sp.archived_total, "dead_lettered": sp.dead_lettered}


def restore(sp: SharePartition, state: dict) -> None:
    """Put a replayed state into a fresh share-partition: acquired records are available again."""
    sp.load(int(state["start"]), int(state["end"]),
            [*state.get("ranges", ()), *((o, o, s, c) for o, s, c in state.get("records", ()))])
    sp.archived_total, sp.dead_lettered = int(state["archived"]), int(state["dead_lettered"])

