"""Avro schemas: parsing with fastavro, and the Avro specification's schema resolution rules
(a reader schema reading data written with a writer schema) as a list of problems."""

import json
from dataclasses import dataclass
from typing import Any

from fastavro.schema import SchemaParseException, UnknownType, parse_schema

from headwater.schemas.invalid import InvalidSchema

# Writer type -> the reader types it resolves to besides itself (the spec's promotions).
PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}
NAMED = {"record", "error", "enum", "fixed"}


@dataclass(frozen=True)
class AvroSchema:
    root: Any
    named: dict[str, Any]  # full name -> parsed named type, the references' included

    @property
    def canonical(self) -> str:
        # Defaults, aliases and logical types stay (the Parsing Canonical Form drops them): a
        # default or an alias changes how data resolves, so schemas differing in one are two versions.
        return json.dumps(self.root, sort_keys=True, separators=(",", ":"))


def parse(schema: str, references: dict[str, str]) -> AvroSchema:
    named: dict[str, Any] = {}
    _parse_references(references, named)
    try:
        root = _parsed(_json(schema), named)
    except UnknownType as e:
        raise InvalidSchema(f"Invalid schema: unknown type {e.name!r} (no such named type and no reference to it)") from e
    except (SchemaParseException, ValueError, TypeError, AttributeError, KeyError) as e:
        raise InvalidSchema(f"Invalid schema: {e}") from e
    _check_unions_and_fields(root, set())
    return AvroSchema(root, named)


def _check_unions_and_fields(schema: Any, seen: set[str]) -> None:
    """What the specification forbids and fastavro lets through: a union holding two schemas
    of one type (or name) or another union, and a record naming two fields alike."""
    if isinstance(schema, list):
        branches = [_type_name(b) for b in schema]
        if "union" in branches or len(set(branches)) < len(branches):
            raise InvalidSchema(f"Invalid schema: union {branches} repeats a type or holds a union")
        for branch in schema:
            _check_unions_and_fields(branch, seen)
    elif isinstance(schema, dict):
        kind = schema["type"]
        if kind in ("record", "error") and schema["name"] not in seen:
            seen.add(schema["name"])
            names = [f["name"] for f in schema["fields"]]
            if len(set(names)) < len(names):
                raise InvalidSchema(f"Invalid schema: record {schema['name']} names a field twice: {names}")
            for f in schema["fields"]:
                _check_unions_and_fields(f["type"], seen)
        elif kind == "array":
            _check_unions_and_fields(schema["items"], seen)
        elif kind == "map":
            _check_unions_and_fields(schema["values"], seen)
        elif not isinstance(kind, str) or kind not in NAMED:
            _check_unions_and_fields(kind, seen)


def _parsed(schema: Any, named: dict[str, Any]) -> Any:
    parsed = parse_schema(schema, named)
    if isinstance(parsed, dict):  # fastavro marks what it parsed; the marks are not the schema
        return {k: v for k, v in parsed.items() if not k.startswith("__fastavro") and k != "__named_schemas"}
    return parsed


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise InvalidSchema(f"Invalid schema: not JSON: {e}") from e


def _parse_references(references: dict[str, str], named: dict[str, Any]) -> None:
    """References may use one another, in any order: parse whichever can be parsed until all are."""
    pending = {name: _json(text) for name, text in references.items()}
    while pending:
        unknown: dict[str, str] = {}
        for name, body in pending.items():
            trial = dict(named)
            try:
                _parsed(body, trial)
            except UnknownType as e:
                unknown[name] = e.name
                continue
            except (SchemaParseException, ValueError, TypeError, AttributeError, KeyError) as e:
                raise InvalidSchema(f"Invalid schema: reference {name!r}: {e}") from e
            named.update(trial)
        if len(unknown) == len(pending):
            name, missing = next(iter(unknown.items()))
            raise InvalidSchema(f"Invalid schema: reference {name!r} uses unknown type {missing!r}")
        pending = {name: pending[name] for name in unknown}


def problems(reader: AvroSchema, writer: AvroSchema) -> list[str]:
    """What keeps a reader with `reader` from reading every datum written with `writer`."""
    return _Resolution(reader.named, writer.named).check(reader.root, writer.root, "")


class _Resolution:
    def __init__(self, reader_named: dict[str, Any], writer_named: dict[str, Any]):
        self.reader_named = reader_named
        self.writer_named = writer_named
        self.assumed: set[tuple[str, str]] = set()  # named pairs under check: recursive types

    def check(self, reader: Any, writer: Any, path: str) -> list[str]:
        reader = _deref(reader, self.reader_named)
        writer = _deref(writer, self.writer_named)
        if isinstance(writer, list):
            return [p for i, branch in enumerate(writer) for p in self.check(reader, branch, f"{path}/{i}")]
        if isinstance(reader, list):
            if any(not self.check(branch, writer, path) for branch in reader):
                return []
            return [f"{path or '/'}: the reader's union {[_type_name(b) for b in reader]} has no branch for the writer's {_type_name(writer)}"]
        r_type, w_type = _type(reader), _type(writer)
        if r_type != w_type:
            if r_type in PROMOTIONS.get(w_type, ()):
                return []
            return [f"{path or '/'}: the reader's {_type_name(reader)} cannot read the writer's {_type_name(writer)}"]
        if w_type == "array":
            return self.check(reader["items"], writer["items"], f"{path}/items")
        if w_type == "map":
            return self.check(reader["values"], writer["values"], f"{path}/values")
        if w_type not in NAMED:
            return []
        if not _same_name(reader, writer):
            return [f"{path or '/'}: the reader's {w_type} {reader['name']} has another name than the writer's {writer['name']} (and no alias for it)"]
        if w_type == "fixed" and reader["size"] != writer["size"]:
            return [f"{path or '/'}: fixed {reader['name']} has size {reader['size']} in the reader, {writer['size']} in the writer"]
        if w_type == "enum":
            missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
            if missing and "default" not in reader:
                return [f"{path or '/'}: enum {reader['name']} lacks the writer's symbols {missing} and has no default"]
            return []
        key = (reader["name"], writer["name"])
        if key in self.assumed:
            return []
        self.assumed.add(key)
        return self._fields(reader, writer, path)

    def _fields(self, reader: dict, writer: dict, path: str) -> list[str]:
        written = {f["name"]: f for f in writer["fields"]}
        found = []
        for field in reader["fields"]:
            names = [field["name"], *field.get("aliases", [])]
            source = next((written[n] for n in names if n in written), None)
            where = f"{path}/fields/{field['name']}"
            if source is not None:
                found += self.check(field["type"], source["type"], where)
            elif "default" not in field:
                found.append(f"{where}: field {field['name']!r} of record {reader['name']} is missing in the writer's data and has no default")
        return found


def _deref(schema: Any, named: dict[str, Any]) -> Any:
    if isinstance(schema, str) and schema in named:
        return named[schema]
    if isinstance(schema, dict):
        inner = schema["type"]
        if not (isinstance(inner, str) and inner in NAMED | {"array", "map"}):
            return _deref(inner, named)  # {"type": "int", "logicalType": ...} resolves as an int
    return schema


def _type(schema: Any) -> str:
    return schema if isinstance(schema, str) else schema["type"]


def _type_name(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict) and schema["type"] in NAMED:
        return f"{schema['type']} {schema['name']}"
    return _type(schema) if isinstance(_type(schema), str) else _type_name(schema["type"])


def _same_name(reader: dict, writer: dict) -> bool:
    # The spec matches unqualified names; a reader's alias may name the writer's full name.
    return reader["name"].rsplit(".", 1)[-1] == writer["name"].rsplit(".", 1)[-1] or writer["name"] in reader.get("aliases", [])
