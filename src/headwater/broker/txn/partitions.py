"""Transactions as the partitions see them: which are open (they hold back the last stable
offset), and the markers that end them.

The last stable offset (LSO) is the first offset of the oldest transaction still open in
a partition, or the high watermark when none is: a read_committed consumer reads up to it
and no further. An abort marker adds (producer id, first offset, marker offset) to the
partition's aborted index (``log.txn_index``), which read_committed fetches hand to clients.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from headwater.log import Log
from headwater.log.txn_index import AbortedTxn
from headwater.records import BatchHeader
from headwater.records.control import encode_marker

if TYPE_CHECKING:
    from headwater.broker.wakeups import GrowthSignals
    from headwater.log import LogManager

logger = logging.getLogger("headwater.txn")

COORDINATOR_EPOCH = 0            # one broker: the coordinator never moves


class TxnPartitions:
    """The open transactions of every partition (producer id -> first offset), and the writer of markers."""

    def __init__(self, logs: LogManager, wakeups: GrowthSignals, fsync_markers: bool):
        # fsync_markers: with --flush always a marker is on disk before the transaction is recorded
        # as complete, so no crash can leave a completed transaction without its markers.
        self._logs, self._wakeups, self._fsync_markers = logs, wakeups, fsync_markers
        self._open: dict[tuple[str, int], dict[int, int]] = {}

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self._open if k[0] == topic]:
            del self._open[key]

    def _opened(self, topic: str, partition: int, plog: Log, producer_id: int, offset: int) -> None:
        open_ = self._open.setdefault((topic, partition), {})
        open_.setdefault(producer_id, offset)
        plog.first_unstable_offset = min(open_.values())

    def appended(self, topic: str, partition: int, plog: Log, header: BatchHeader, offset: int) -> None:
        """A transactional batch went in at ``offset``: its transaction is open here from its first batch."""
        self._opened(topic, partition, plog, header.producer_id, offset)

    def open_since(self, topic: str, partition: int, producer_id: int) -> int | None:
        """The first offset of ``producer_id``'s transaction open in this partition, if one is."""
        return self._open.get((topic, partition), {}).get(producer_id)

    def last_stable_offset(self, topic: str, partition: int, plog: Log) -> int:
        """Never below the log start offset: retention may have taken an open transaction's start."""
        first_open = plog.first_unstable_offset   # kept with _open: read per partition by every fetch
        return max(plog.log_end_offset if first_open is None else first_open, plog.log_start_offset)

    def recover_open(self, topic: str, partition: int, producer_ids: set[int]) -> None:
        """After a restart: find where each of ``producer_ids``' unfinished transactions begins in
        this partition (its first transactional batch after its last marker), so the marker that
        ends it indexes it right. One walk of the partition serves every producer."""
        plog = self._logs.get_log(topic, partition)
        if plog is None:
            return
        first: dict[int, int] = {}
        for _, _, header in plog.batches(plog.log_start_offset):
            if header.producer_id not in producer_ids:
                continue
            if header.is_control:
                first.pop(header.producer_id, None)
            elif header.is_transactional:
                first.setdefault(header.producer_id, header.base_offset)
        for producer_id, offset in first.items():
            self._opened(topic, partition, plog, producer_id, offset)

    def write_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool) -> bool:
        """End ``producer_id``'s transaction in one partition (a partition deleted meanwhile needs
        no marker); False if the log refused the write (logged): it is to be tried again."""
        plog = self._logs.get_log(topic, partition)
        if plog is None:
            return True
        marker = bytearray(encode_marker(producer_id, producer_epoch, commit, COORDINATOR_EPOCH,
                                         int(time.time() * 1000)))
        try:
            offset, _ = plog.append(marker)
        except OSError as exc:
            logger.error("cannot write a transaction marker to %s-%d: %s", topic, partition, exc)
            return False
        durable = self._flush(plog)
        open_ = self._open.get((topic, partition), {})
        first = open_.pop(producer_id, None)
        plog.first_unstable_offset = min(open_.values(), default=None)
        if first is not None and not commit:
            with plog.lock:  # the cleaner rewrites the index under the same lock
                plog.aborted_txns.append(AbortedTxn(producer_id, first, offset))
        self._wakeups.notify(topic, partition)
        return durable

    def _flush(self, plog: Log) -> bool:
        if not self._fsync_markers:
            return True
        try:
            plog.flush()
            return True
        except OSError as exc:  # the marker is in the log, not yet durable: written again on the retry
            logger.error("cannot fsync a transaction marker in %s: %s", plog.directory.name, exc)
            return False
