"""The registry's two questions about a schema: is it valid (and what is its canonical text,
which decides "the same schema"), and which compatibility rules does it break against the
versions before it. Each format's rules live in its own module; this one applies the levels."""

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

from headwater.schemas import avro, json_schema, protobuf
from headwater.schemas.invalid import InvalidSchema

__all__ = ["InvalidSchema", "parse", "incompatibilities", "LEVELS"]

FORMATS: dict[str, ModuleType] = {"AVRO": avro, "PROTOBUF": protobuf, "JSON": json_schema}
# level -> (the new schema reads the old data, the old schema reads the new data)
LEVELS: dict[str, tuple[bool, bool]] = {
    "NONE": (False, False),
    "BACKWARD": (True, False),
    "BACKWARD_TRANSITIVE": (True, False),
    "FORWARD": (False, True),
    "FORWARD_TRANSITIVE": (False, True),
    "FULL": (True, True),
    "FULL_TRANSITIVE": (True, True),
}


def _format(schema_type: str) -> ModuleType:
    try:
        return FORMATS[schema_type]
    except KeyError:
        raise InvalidSchema(f"Invalid schema: unknown schema type {schema_type!r}") from None


def parse(schema_type: str, schema: str, references: dict[str, str]) -> str:
    """The canonical text of a valid schema; InvalidSchema otherwise."""
    with _bounded_nesting():
        return _format(schema_type).parse(schema, references).canonical


@contextmanager
def _bounded_nesting() -> Iterator[None]:
    # The parsers and the rules recurse once per level of nesting: a schema nested past
    # Python's recursion limit is refused as invalid rather than failing the request.
    try:
        yield
    except RecursionError:
        raise InvalidSchema("Invalid schema: nested too deeply") from None


def incompatibilities(schema_type: str, new: str, previous: list[str], level: str,
                      references: dict[str, str]) -> list[str]:
    """Why `new` may not follow `previous` (oldest first: every version for the transitive
    levels, the latest for the others) at `level`; empty when it may. `references` serves
    the new schema and the previous ones alike."""
    if level not in LEVELS:
        raise ValueError(f"unknown compatibility level {level!r}")
    backward, forward = LEVELS[level]
    if not (backward or forward):
        return []
    fmt = _format(schema_type)
    found = []
    with _bounded_nesting():
        current = fmt.parse(new, references)
        for index, text in enumerate(previous):
            old = fmt.parse(text, references)
            label = f"previous schema {index + 1} of {len(previous)}"
            if backward:
                found += [f"new schema reading data written with {label}: {p}" for p in fmt.problems(current, old)]
            if forward:
                found += [f"{label} reading data written with the new schema: {p}" for p in fmt.problems(old, current)]
    return found
