"""JSON Schemas: checked against their draft's metaschema by `jsonschema`, references resolved
by `referencing`, and a structural check that a reader schema accepts every document a writer
schema accepts (Confluent's rules: open and closed content models, properties, required,
types, enums, bounds, combinations)."""

import json
import re
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft7Validator, SchemaError, validators
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT7

from headwater.schemas.invalid import InvalidSchema

# Keywords that constrain nothing: a schema made only of them accepts every document.
ANNOTATIONS = {"$schema", "$id", "$comment", "title", "description", "default", "examples",
               "definitions", "$defs", "readOnly", "writeOnly", "deprecated"}
LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")
UNIONS = ("anyOf", "oneOf")


@dataclass(frozen=True)
class JsonSchema:
    root: Any
    registry: Registry

    @property
    def canonical(self) -> str:
        return json.dumps(self.root, sort_keys=True, separators=(",", ":"))


def _document(text: str, what: str) -> Any:
    try:
        document = json.loads(text)
    except ValueError as e:
        raise InvalidSchema(f"Invalid schema: {what} is not JSON: {e}") from e
    if not isinstance(document, (dict, bool)):
        raise InvalidSchema(f"Invalid schema: {what} is neither an object nor a boolean")
    try:
        validators.validator_for(document, default=Draft7Validator).check_schema(document)
    except SchemaError as e:
        raise InvalidSchema(f"Invalid schema: {what}: {e.message} at {'/'.join(map(str, e.path)) or '/'}") from e
    return document


def parse(schema: str, references: dict[str, str]) -> JsonSchema:
    root = _document(schema, "the schema")
    registry = Registry().with_resources(
        (url, Resource.from_contents(_document(text, f"reference {url!r}"), default_specification=DRAFT7))
        for url, text in references.items())
    parsed = JsonSchema(root, registry)
    _check_references(root, _resolver(parsed), set())
    return parsed


def _resolver(schema: JsonSchema):
    return schema.registry.resolver_with_root(Resource.from_contents(schema.root, default_specification=DRAFT7))


def _check_references(node: Any, resolver, seen: set[int]) -> None:
    """Every $ref, in the schema and in what it refers to, must lead somewhere."""
    if isinstance(node, list):
        for item in node:
            _check_references(item, resolver, seen)
    if not isinstance(node, dict):
        return
    ref = node.get("$ref")
    if isinstance(ref, str):
        try:
            resolved = resolver.lookup(ref)
        except Unresolvable as e:
            raise InvalidSchema(f"Invalid schema: $ref {ref!r} refers to nothing (no such reference)") from e
        if id(resolved.contents) not in seen:
            seen.add(id(resolved.contents))
            _check_references(resolved.contents, resolved.resolver, seen)
    for key, value in node.items():
        if key not in ("enum", "const", "default", "examples"):
            _check_references(value, resolver, seen)


def problems(reader: JsonSchema, writer: JsonSchema) -> list[str]:
    """What keeps `reader` from accepting every document `writer` accepts."""
    return _Comparison().check(reader.root, _resolver(reader), writer.root, _resolver(writer), "#")


def _anything(schema: Any) -> bool:
    return schema is True or (isinstance(schema, dict) and not set(schema) - ANNOTATIONS)


def _types(schema: dict) -> set[str] | None:
    declared = schema.get("type")
    if declared is None:
        return None
    return {declared} if isinstance(declared, str) else set(declared)


class _Comparison:
    def __init__(self):
        self.assumed: set[tuple[int, int]] = set()  # (reader, writer) pairs under check: recursive $refs

    def check(self, reader: Any, r_res, writer: Any, w_res, path: str) -> list[str]:
        reader, r_res = _deref(reader, r_res)
        writer, w_res = _deref(writer, w_res)
        pair = (id(reader), id(writer))
        if writer is False or _anything(reader) or pair in self.assumed:
            return []
        if reader is False:
            return [f"{path}: the reader accepts nothing where the writer accepts documents"]
        if _anything(writer):
            return [f"{path}: the writer accepts any document here, the reader constrains it"]
        self.assumed.add(pair)
        try:
            return self._combinations(reader, r_res, writer, w_res, path)
        finally:
            self.assumed.discard(pair)

    def _combinations(self, reader: dict, r_res, writer: dict, w_res, path: str) -> list[str]:
        for key in UNIONS:
            if key in writer:  # every document of every branch must be accepted
                rest = _without(writer, key)
                return [p for i, branch in enumerate(writer[key])
                        for p in self.check(reader, r_res, _merged(rest, branch, w_res), w_res, f"{path}/{key}/{i}")]
        for key in UNIONS:
            if key in reader:
                found = self.check(_without(reader, key), r_res, writer, w_res, path)
                if not any(not self.check(b, r_res, writer, w_res, path) for b in reader[key]):
                    found.append(f"{path}: no branch of the reader's {key} accepts the writer's documents")
                return found
        if "allOf" in reader:
            found = self.check(_without(reader, "allOf"), r_res, writer, w_res, path)
            return found + [p for i, member in enumerate(reader["allOf"])
                            for p in self.check(member, r_res, writer, w_res, f"{path}/allOf/{i}")]
        if "allOf" in writer:  # documents meet every member: one member the reader accepts is enough
            rest = _without(writer, "allOf")
            options = [rest, *(_merged(rest, m, w_res) for m in writer["allOf"])]
            outcomes = [self.check(reader, r_res, option, w_res, path) for option in options]
            return [] if any(not o for o in outcomes) else outcomes[0]
        return self._constraints(reader, r_res, writer, w_res, path)

    def _constraints(self, reader: dict, r_res, writer: dict, w_res, path: str) -> list[str]:
        found = []
        r_types, w_types = _types(reader), _types(writer)
        if r_types is not None:
            if w_types is None:
                found.append(f"{path}: the reader requires type {sorted(r_types)}, the writer allows any type")
            else:
                narrowed = {t for t in w_types if t not in r_types and not (t == "integer" and "number" in r_types)}
                if narrowed:
                    found.append(f"{path}: the reader's type {sorted(r_types)} does not take the writer's {sorted(narrowed)}")
        found += _values(reader, writer, path)
        found += _bounds(reader, writer, path)
        found += self._items(reader, r_res, writer, w_res, path)
        found += self._properties(reader, r_res, writer, w_res, path)
        if "not" in reader and reader["not"] != writer.get("not"):
            found.append(f"{path}/not: the reader excludes documents the writer may write")
        return found

    def _items(self, reader: dict, r_res, writer: dict, w_res, path: str) -> list[str]:
        if reader.get("uniqueItems") and not writer.get("uniqueItems"):
            return [f"{path}/uniqueItems: the reader requires unique items, the writer does not"]
        r_items, w_items = reader.get("items", True), writer.get("items", True)
        if isinstance(r_items, list) or isinstance(w_items, list):
            if r_items != w_items:
                return [f"{path}/items: the tuple of items changed"]
            return []
        return self.check(r_items, r_res, w_items, w_res, f"{path}/items")

    def _properties(self, reader: dict, r_res, writer: dict, w_res, path: str) -> list[str]:
        found = []
        r_props, w_props = reader.get("properties", {}), writer.get("properties", {})
        # A newly required property the reader has a default for is one it can fill in (Confluent's rule).
        added_required = sorted(name for name in set(reader.get("required", [])) - set(writer.get("required", []))
                                if not (isinstance(r_props.get(name), dict) and "default" in r_props[name]))
        if added_required:
            found.append(f"{path}/required: the reader requires {added_required}, which the writer may leave out")
        for name in sorted(w_props.keys() | r_props.keys()):
            where = f"{path}/properties/{name}"
            r_schema, w_schema = _property(reader, name), _property(writer, name)
            if name not in r_props and r_schema is False and w_schema is not False:
                found.append(f"{where}: removed from a closed content model (the reader refuses it, the writer may write it)")
            elif name not in w_props and w_schema is not False and not _anything(r_schema) and _anything(w_schema):
                found.append(f"{where}: added to an open content model (the writer may write it with any value)")
            else:
                found += self.check(r_schema, r_res, w_schema, w_res, where)
        r_extra, w_extra = reader.get("additionalProperties", True), writer.get("additionalProperties", True)
        if r_extra is False and w_extra is not False:
            found.append(f"{path}/additionalProperties: the reader's content model is closed, the writer's open")
        elif w_extra is not False:
            found += self.check(r_extra, r_res, w_extra, w_res, f"{path}/additionalProperties")
        return found


def _deref(schema: Any, resolver) -> tuple[Any, Any]:
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str):
        resolved = resolver.lookup(schema["$ref"])
        schema, resolver = resolved.contents, resolved.resolver
    return schema, resolver


def _without(schema: dict, key: str) -> dict:
    return {k: v for k, v in schema.items() if k != key}


def _merged(rest: dict, branch: Any, resolver) -> Any:
    branch, _ = _deref(branch, resolver)
    if not isinstance(branch, dict):
        return branch
    return {**rest, **branch}


def _property(schema: dict, name: str) -> Any:
    """The schema a property named `name` must meet (properties, then patterns, then the rest)."""
    if name in schema.get("properties", {}):
        return schema["properties"][name]
    for pattern, subschema in schema.get("patternProperties", {}).items():
        if re.search(pattern, name):
            return subschema
    return schema.get("additionalProperties", True)


def _values(reader: dict, writer: dict, path: str) -> list[str]:
    allowed = reader["enum"] if "enum" in reader else [reader["const"]] if "const" in reader else None
    if allowed is None:
        return []
    written = writer["enum"] if "enum" in writer else [writer["const"]] if "const" in writer else None
    if written is None:
        return [f"{path}: the reader allows only {allowed}, the writer any value"]
    missing = [v for v in written if v not in allowed]
    return [f"{path}/enum: the reader lacks the writer's values {missing}"] if missing else []


def _bounds(reader: dict, writer: dict, path: str) -> list[str]:
    found = []
    for key in LOWER_BOUNDS:
        if key in reader and (key not in writer or writer[key] < reader[key]):
            found.append(f"{path}/{key}: the reader's {reader[key]} is narrower than the writer's {writer.get(key, 'none')}")
    for key in UPPER_BOUNDS:
        if key in reader and (key not in writer or writer[key] > reader[key]):
            found.append(f"{path}/{key}: the reader's {reader[key]} is narrower than the writer's {writer.get(key, 'none')}")
    if "multipleOf" in reader and ("multipleOf" not in writer or writer["multipleOf"] % reader["multipleOf"]):
        found.append(f"{path}/multipleOf: the writer's values need not be multiples of {reader['multipleOf']}")
    if "pattern" in reader and reader["pattern"] != writer.get("pattern"):
        found.append(f"{path}/pattern: the reader requires {reader['pattern']!r}, the writer {writer.get('pattern', 'none')!r}")
    return found
