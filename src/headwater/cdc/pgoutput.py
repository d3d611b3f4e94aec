"""Sans-IO decoder for PostgreSQL's `pgoutput` logical replication protocol (version 1).

Bytes of one replication message in, one message object out; for the bulk of a stream, an
insert's row straight from its bytes (`insert_relid`, `insert_row`). Message layouts are
those of the PostgreSQL docs, "Logical Replication Message Formats". LSNs are integers.
"""
from __future__ import annotations

from dataclasses import dataclass
import functools
import struct
from typing import Any, Callable

class UnchangedToast:
    """A TOASTed value the update did not touch: PostgreSQL does not send it."""

    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"


UNCHANGED = UnchangedToast()


@dataclass(slots=True)
class Begin:
    final_lsn: int
    commit_ts_us: int  # microseconds since 2000-01-01 UTC (PostgreSQL epoch)
    xid: int


@dataclass(slots=True)
class Commit:
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts_us: int


@dataclass(slots=True)
class Origin:
    lsn: int
    name: str


@dataclass(slots=True)
class Column:
    name: str
    type_oid: int
    type_modifier: int
    is_key: bool


@dataclass(slots=True)
class Relation:
    relid: int
    schema: str
    table: str
    replica_identity: str  # d(efault), n(othing), f(ull), i(ndex)
    columns: list


@dataclass(slots=True)
class Type:
    oid: int
    schema: str
    name: str


@dataclass(slots=True)
class Insert:
    relid: int
    new: list  # one value per column: None, UNCHANGED, str (text) or bytes (binary)


@dataclass(slots=True)
class Update:
    relid: int
    old: list | None  # the old key ('K') or, with REPLICA IDENTITY FULL, the old row ('O')
    old_kind: str | None
    new: list


@dataclass(slots=True)
class Delete:
    relid: int
    old: list
    old_kind: str


@dataclass(slots=True)
class Truncate:
    relids: list
    cascade: bool
    restart_identity: bool


@dataclass(slots=True)
class LogicalMessage:
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


Message = Begin | Commit | Origin | Relation | Type | Insert | Update | Delete | Truncate | LogicalMessage


class DecodeError(ValueError):
    pass


@functools.cache
def _layout(fmt: str) -> struct.Struct:
    return struct.Struct(fmt)


_INT16, _INT32, _UINT32 = struct.Struct("!h"), struct.Struct("!i"), struct.Struct("!I")
_BEGIN, _COMMIT = struct.Struct("!qqI"), struct.Struct("!bqqq")


class _Reader:
    """A cursor over one message; running past the end raises struct.error (see `decode`)."""

    def __init__(self, data: bytes):
        self.data = bytes(data)
        self.pos = 0

    def take(self, fmt: str) -> Any:
        layout = _layout(fmt)
        value = layout.unpack_from(self.data, self.pos)
        self.pos += layout.size
        return value[0] if len(value) == 1 else value

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise DecodeError("message truncated")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def cstring(self) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise DecodeError("unterminated string")
        text = self.data[self.pos:end].decode()
        self.pos = end + 1
        return text

    def tuple_data(self) -> list:
        values, self.pos = _tuple_data(self.data, self.pos)
        return values


def _tuple_data(data: bytes, pos: int) -> tuple[list, int]:
    """TupleData at `pos`: (one value per column, the position after it).

    The hot loop of the stream: one pass with local variables, no helper calls."""
    (count,) = _INT16.unpack_from(data, pos)
    pos += 2
    values = []
    for _ in range(count):
        kind = data[pos]
        pos += 1
        if kind == 0x74 or kind == 0x62:  # 't' text, 'b' binary: Int32 length, then bytes
            (length,) = _INT32.unpack_from(data, pos)
            pos += 4
            end = pos + length
            if length < 0 or end > len(data):
                raise DecodeError("message truncated")
            values.append(data[pos:end].decode() if kind == 0x74 else data[pos:end])
            pos = end
        elif kind == 0x6E:  # 'n'
            values.append(None)
        elif kind == 0x75:  # 'u'
            values.append(UNCHANGED)
        else:
            raise DecodeError(f"unknown tuple data kind {chr(kind)!r}")
    return values, pos


def insert_relid(payload: bytes) -> int | None:
    """The relation of an Insert, read without decoding it; None for any other message."""
    if len(payload) > 5 and payload[0] == 0x49 and payload[5] == 0x4E:  # 'I', then 'N' (new tuple)
        return _UINT32.unpack_from(payload, 1)[0]
    return None


def insert_row(payload: bytes, columns: list[tuple[str, Callable[[str], Any] | None]]) -> dict | None:
    """The new row of an Insert as {column: value}, in one pass: the bulk of a stream. `columns`
    are the relation's (`insert_relid`), each with how its text becomes a value (None: the text
    is the value); nulls are None. None where the tuple holds anything else (binary or unchanged
    values, another column count): `decode` the message then."""
    try:
        (count,) = _INT16.unpack_from(payload, 6)
        if count != len(columns):
            return None
        row, pos, unpack = {}, 8, _INT32.unpack_from
        for name, convert in columns:
            kind = payload[pos]
            if kind == 0x74:  # 't' text: Int32 length, then bytes
                (length,) = unpack(payload, pos + 1)
                pos += 5
                end = pos + length
                if length < 0 or end > len(payload):
                    raise DecodeError("message truncated")
                text = payload[pos:end].decode()
                row[name] = text if convert is None else convert(text)
                pos = end
            elif kind == 0x6E:  # 'n'
                row[name] = None
                pos += 1
            else:
                return None
        return row
    except (struct.error, IndexError):
        raise DecodeError("message truncated") from None


def decode(payload: bytes) -> Message:
    """Decode one pgoutput message."""
    try:
        # Most of a stream, decoded inline: inserts, and the begin and commit around each transaction.
        tag = payload[0]
        if tag == 0x49 and payload[5] == 0x4E:  # 'I', then 'N' (new tuple)
            return Insert(_UINT32.unpack_from(payload, 1)[0], _tuple_data(payload, 6)[0])
        if tag == 0x42:  # 'B'
            return Begin(*_BEGIN.unpack_from(payload, 1))
        if tag == 0x43:  # 'C'
            return Commit(*_COMMIT.unpack_from(payload, 1))
        return _decode(_Reader(payload))
    except (struct.error, IndexError):
        raise DecodeError("message truncated") from None


def _decode(r: _Reader) -> Message:
    tag = chr(r.take("!B"))
    if tag == "O":
        return Origin(r.take("!q"), r.cstring())
    if tag == "R":
        relid, schema, table = r.take("!I"), r.cstring(), r.cstring()
        identity = chr(r.take("!B"))
        columns = []
        for _ in range(r.take("!h")):
            flags, name = r.take("!B"), r.cstring()
            oid, typmod = r.take("!Ii")
            columns.append(Column(name, oid, typmod, bool(flags & 1)))
        return Relation(relid, schema, table, identity, columns)
    if tag == "Y":
        return Type(r.take("!I"), r.cstring(), r.cstring())
    if tag == "I":
        relid = r.take("!I")
        _expect(r, "N")
        return Insert(relid, r.tuple_data())
    if tag == "U":
        relid = r.take("!I")
        kind = chr(r.take("!B"))
        old = None
        old_kind = None
        if kind in "KO":
            old, old_kind = r.tuple_data(), kind
            kind = chr(r.take("!B"))
        if kind != "N":
            raise DecodeError(f"update: expected 'N', got {kind!r}")
        return Update(relid, old, old_kind, r.tuple_data())
    if tag == "D":
        relid = r.take("!I")
        kind = chr(r.take("!B"))
        if kind not in "KO":
            raise DecodeError(f"delete: expected 'K' or 'O', got {kind!r}")
        return Delete(relid, r.tuple_data(), kind)
    if tag == "T":
        count, options = r.take("!iB")
        relids = [r.take("!I") for _ in range(count)]
        return Truncate(relids, bool(options & 1), bool(options & 2))
    if tag == "M":
        flags, lsn, prefix = r.take("!B"), r.take("!q"), r.cstring()
        return LogicalMessage(bool(flags & 1), lsn, prefix, r.raw(r.take("!i")))
    raise DecodeError(f"unknown pgoutput message {tag!r}")


def _expect(r: _Reader, want: str) -> None:
    got = chr(r.take("!B"))
    if got != want:
        raise DecodeError(f"expected {want!r}, got {got!r}")


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)
