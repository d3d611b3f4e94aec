"""Control batches: the transaction markers that end a transaction in a partition."""
from __future__ import annotations

import struct

from .encoding import Record, encode_batch
from .layout import ATTR_CONTROL, ATTR_TRANSACTIONAL

CONTROL_ABORT, CONTROL_COMMIT = 0, 1
_CONTROL_KEY = struct.Struct(">hh")      # version 0, type
_CONTROL_VALUE = struct.Struct(">hi")    # version 0, coordinator epoch


def encode_marker(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                  timestamp: int) -> bytes:
    """The control batch that ends a transaction in one partition: transactional and control
    attributes, one record whose key says commit or abort."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    return encode_batch([Record(0, timestamp, key, value)], producer_id=producer_id, producer_epoch=producer_epoch,
                        attributes=ATTR_TRANSACTIONAL | ATTR_CONTROL)


def marker_is_commit(record: Record) -> bool:
    """Whether a control record (a decoded marker batch's one record) commits its transaction."""
    return _CONTROL_KEY.unpack(record.key)[1] == CONTROL_COMMIT
