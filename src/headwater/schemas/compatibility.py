"""Placeholder until the real parsing and compatibility checks land: a schema is "valid" when
Avro and JSON Schema texts are JSON, and every change is compatible."""
from __future__ import annotations

import json


class InvalidSchema(ValueError):
    pass


def parse(schema_type: str, schema: str, references: dict[str, str]) -> str:
    if schema_type == "PROTOBUF":
        return schema
    try:
        return json.dumps(json.loads(schema), sort_keys=True, separators=(",", ":"))
    except ValueError as exc:
        raise InvalidSchema(f"invalid {schema_type} schema: {exc}") from None


def incompatibilities(schema_type: str, new: str, previous: list[str], level: str,
                      references: dict[str, str]) -> list[str]:
    return []
