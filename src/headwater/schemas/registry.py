"""The schema registry's state machine: subjects, their versions and the global schema ids, the
compatibility level and mode of each subject and of the registry, as the Confluent Schema
Registry keeps them.

Every change is a record written to ``storage`` (the compacted ``_schemas`` topic, ``store``)
and takes effect only when it is read back, so replaying the topic at start and following what
was written since are one path: the state is a fold of the log. Records are keyed so that
compaction keeps the latest of each thing (the key and value shapes are Confluent's):

    {"keytype": "SCHEMA", "subject": S, "version": V, "magic": 1}
        -> {"subject", "version", "id", "schemaType", "schema", "references", "deleted", "ts"}
    {"keytype": "CONFIG", "subject": S or null, "magic": 0} -> {"compatibilityLevel": L}
    {"keytype": "MODE", "subject": S or null, "magic": 0}   -> {"mode": M}
    {"keytype": "ID", "magic": 0} -> {"next": N}   (the next id: ids are never handed out twice,
                                                     not even after a hard delete and compaction)

A null value (tombstone) is a hard delete, or a subject's config or mode going back to the
registry's. Errors are ``RegistryError``s carrying the HTTP status and Confluent's error code.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from headwater.broker.clock import Clock
from headwater.schemas import protobuf
from headwater.schemas.compatibility import InvalidSchema, incompatibilities, parse

log = logging.getLogger("headwater.schemas")

SCHEMA_TYPES = ("AVRO", "PROTOBUF", "JSON")
LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
MAX_VERSION = 2**31 - 1
LATEST = -1   # "latest", or -1, as a version
ID_KEY = {"keytype": "ID", "magic": 0}


class RegistryError(Exception):
    """An answer other than success: HTTP ``status`` and Confluent's ``code``, as clients parse them."""

    def __init__(self, status: int, code: int, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(subject: str, version: int) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found for subject '{subject}'.")


def schema_not_found(what: str = "Schema not found") -> RegistryError:
    return RegistryError(404, 40403, what)


def invalid_schema(why: str) -> RegistryError:
    return RegistryError(422, 42201, f"Invalid schema: {why}")


def not_permitted(why: str) -> RegistryError:
    return RegistryError(422, 42205, why)


class StorageUnavailable(Exception):
    """The write did not reach the log."""


class Storage(Protocol):
    def write(self, pairs: list[tuple[dict, dict | None]]) -> None:
        """Append (key, value) records in one batch; raises StorageUnavailable."""

    def read(self) -> Iterator[tuple[dict, dict | None]]:
        """The records appended since the last read (all of them, the first time), oldest first."""


@dataclass(frozen=True)
class Reference:
    name: str
    subject: str
    version: int

    def to_json(self) -> dict:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class Version:
    subject: str
    version: int
    id: int
    schema_type: str
    schema: str
    references: tuple[Reference, ...]
    deleted: bool
    ts: int

    def to_json(self) -> dict:
        return {"subject": self.subject, "version": self.version, "id": self.id, "schemaType": self.schema_type,
                "schema": self.schema, "references": [r.to_json() for r in self.references],
                "deleted": self.deleted, "ts": self.ts}


@dataclass(frozen=True)
class Setting:
    """A per-subject setting that falls back to the registry's: the compatibility level or the mode."""
    keytype: str                # its records' key type
    field: str                  # its records' (and GET answers') value field
    request_field: str          # what a PUT sends (and is answered with)
    allowed: tuple[str, ...]
    default: str
    invalid: int                # the error code of a value not allowed
    unset: int                  # the error code of a subject without its own


COMPATIBILITY = Setting("CONFIG", "compatibilityLevel", "compatibility", LEVELS, "BACKWARD", 42203, 40408)
MODE = Setting("MODE", "mode", "mode", MODES, "READWRITE", 42204, 40409)
SETTINGS = {s.keytype: s for s in (COMPATIBILITY, MODE)}


def parse_version(text: str | int) -> int:
    """A version as a URL or a reference names it: 1..2^31-1, or "latest" / -1 (LATEST)."""
    if isinstance(text, str) and text.lower() == "latest":
        return LATEST
    try:
        version = int(text)
    except (TypeError, ValueError):
        version = 0
    if version == LATEST or 1 <= version <= MAX_VERSION:
        return version
    raise RegistryError(422, 42202, f"The specified version '{text}' is not a valid version id. "
                                    f"Allowed values are between [1, {MAX_VERSION}] and the string \"latest\"")


def schema_key(subject: str, version: int) -> dict:
    return {"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}


def setting_key(keytype: str, subject: str | None) -> dict:
    return {"keytype": keytype, "subject": subject, "magic": 0}


class Registry:
    def __init__(self, storage: Storage, clock: Clock, max_schema_bytes: int):
        # max_schema_bytes: the longest schema (JSON-escaped) one record of the _schemas topic may carry
        self.storage, self.clock, self.max_schema_bytes = storage, clock, max_schema_bytes
        self._subjects: dict[str, dict[int, Version]] = {}
        self._by_id: dict[int, Version] = {}      # the first version that registered each id
        self._ids: dict[tuple, int] = {}          # (type, canonical text, references) -> id
        self._canonical: dict[int, str] = {}
        self._settings: dict[str, dict[str | None, str]] = {keytype: {} for keytype in SETTINGS}
        self._next_id = 1
        self.catch_up()

    # --- the log ---------------------------------------------------------------------------------

    def catch_up(self) -> None:
        """Apply what the log holds beyond what was applied: at start all of it."""
        for key, value in self.storage.read():
            try:
                self._apply(key, value)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:  # someone else's record
                log.warning("skipping unreadable _schemas record %r: %r", key, exc)

    def _write(self, pairs: list[tuple[dict, dict | None]]) -> None:
        try:
            self.storage.write(pairs)
        except StorageUnavailable as exc:
            raise RegistryError(500, 50001, f"Error in the backend data store: {exc}") from None
        self.catch_up()

    def _apply(self, key: dict, value: dict | None) -> None:
        keytype = key["keytype"]
        if keytype == "SCHEMA":
            self._apply_schema(str(key["subject"]), int(key["version"]), value)
        elif keytype in SETTINGS:
            setting, values, subject = SETTINGS[keytype], self._settings[keytype], key["subject"]
            if value is None:
                values.pop(subject, None)
            else:
                chosen = str(value[setting.field]).upper()
                if chosen not in setting.allowed:
                    raise ValueError(f"unknown {setting.field} {chosen!r}")
                values[None if subject is None else str(subject)] = chosen
        elif keytype == "ID":
            self._next_id = max(self._next_id, int(value["next"]))
        else:
            raise ValueError(f"unknown keytype {keytype!r}")

    def _apply_schema(self, subject: str, number: int, value: dict | None) -> None:
        versions = self._subjects.setdefault(subject, {})
        if value is None:
            gone = versions.pop(number, None)
            if not versions:
                del self._subjects[subject]
            if gone is not None and not self._users(gone.id):
                self._forget_id(gone.id)
            return
        schema_type = str(value.get("schemaType") or "AVRO")
        if schema_type not in SCHEMA_TYPES:
            raise ValueError(f"unknown schemaType {schema_type!r}")
        references = tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"]))
                           for r in value.get("references") or ())
        version = Version(subject, number, int(value["id"]), schema_type, str(value["schema"]), references,
                          bool(value.get("deleted", False)), int(value.get("ts", 0)))
        versions[number] = version
        if version.id not in self._by_id:
            try:
                canonical = parse(schema_type, version.schema, self._reference_texts(references))
            except (InvalidSchema, RegistryError):  # written by a laxer parser or a writer other than us
                canonical = version.schema
            self._by_id[version.id] = version
            self._canonical[version.id] = canonical
            self._ids[(schema_type, canonical, references)] = version.id
        self._next_id = max(self._next_id, version.id + 1)

    def _users(self, schema_id: int) -> list[Version]:
        return [v for versions in self._subjects.values() for v in versions.values() if v.id == schema_id]

    def _forget_id(self, schema_id: int) -> None:
        first = self._by_id.pop(schema_id)
        canonical = self._canonical.pop(schema_id)
        self._ids.pop((first.schema_type, canonical, first.references), None)

    # --- reading ---------------------------------------------------------------------------------

    def subjects(self, deleted: bool = False, deleted_only: bool = False, prefix: str = "") -> list[str]:
        self.catch_up()
        found = []
        for subject, versions in sorted(self._subjects.items()):
            live = any(not v.deleted for v in versions.values())
            if subject.startswith(prefix) and (not live if deleted_only else live or deleted):
                found.append(subject)
        return found

    def versions(self, subject: str, deleted: bool = False, deleted_only: bool = False) -> list[int]:
        self.catch_up()
        found = [v.version for v in self._versions(subject, deleted or deleted_only)
                 if v.deleted or not deleted_only]
        if not found:
            raise subject_not_found(subject)
        return found

    def _versions(self, subject: str, deleted: bool) -> list[Version]:
        return [v for _, v in sorted(self._subjects.get(subject, {}).items()) if deleted or not v.deleted]

    def version(self, subject: str, number: int, deleted: bool = False) -> Version:
        """A version of the subject (LATEST: its newest); soft-deleted ones only when ``deleted``."""
        self.catch_up()
        versions = self._versions(subject, deleted)
        if not versions:
            raise subject_not_found(subject)
        if number == LATEST:
            return versions[-1]
        found = next((v for v in versions if v.version == number), None)
        if found is None:
            raise version_not_found(subject, number)
        return found

    def by_id(self, schema_id: int) -> Version:
        self.catch_up()
        found = self._by_id.get(schema_id)
        if found is None:
            raise schema_not_found(f"Schema {schema_id} not found")
        return found

    def id_versions(self, schema_id: int, deleted: bool = False) -> list[Version]:
        self.by_id(schema_id)
        return sorted((v for v in self._users(schema_id) if deleted or not v.deleted),
                      key=lambda v: (v.subject, v.version))

    def referenced_by(self, subject: str, number: int) -> list[int]:
        """The ids of the live schemas that reference this version."""
        target = self.version(subject, number, deleted=True)
        return sorted({v.id for v in self._referrers(target) if not v.deleted})

    def _referrers(self, target: Version) -> list[Version]:
        return [v for versions in self._subjects.values() for v in versions.values()
                if any(r.subject == target.subject and r.version == target.version for r in v.references)]

    def setting(self, setting: Setting, subject: str | None = None, default_to_global: bool = False) -> str:
        """The subject's own (an error if it has none), its or else the registry's (``default_to_global``),
        or the registry's (no subject)."""
        self.catch_up()
        values = self._settings[setting.keytype]
        if subject is None or default_to_global:
            return values.get(subject) or values.get(None) or setting.default
        if subject not in values:
            raise RegistryError(404, setting.unset, f"Subject '{subject}' does not have subject-level "
                                                    f"{setting.request_field} configured")
        return values[subject]

    def compatibility(self, subject: str | None = None, default_to_global: bool = False) -> str:
        return self.setting(COMPATIBILITY, subject, default_to_global)

    def mode(self, subject: str | None = None, default_to_global: bool = False) -> str:
        return self.setting(MODE, subject, default_to_global)

    def text(self, version: Version, serialized: bool = False) -> str:
        """The schema as registered, or (``serialized``, as confluent-kafka's Protobuf clients
        ask: ``format=serialized``) a Protobuf one as a base64 FileDescriptorProto, whether it
        was registered as .proto text or already so."""
        if not serialized or version.schema_type != "PROTOBUF":
            return version.schema
        try:
            return protobuf.serialized(version.schema, self._reference_texts(version.references))
        except InvalidSchema as exc:   # written to _schemas by a laxer writer than us
            raise RegistryError(422, 42201, str(exc)) from None

    # --- schemas in, checked -------------------------------------------------------------------------

    def _resolve(self, references: list) -> tuple[Reference, ...]:
        """The request's references, each to a version that exists (LATEST: the subject's newest now)."""
        resolved = []
        for ref in references:
            if not isinstance(ref, dict) or not all(isinstance(ref.get(f), str) for f in ("name", "subject")):
                raise invalid_schema('a reference is {"name": string, "subject": string, "version": number}')
            try:
                target = self.version(ref["subject"], parse_version(ref.get("version", LATEST)), deleted=True)
            except RegistryError:
                raise invalid_schema(f"reference {ref['name']!r} names subject {ref['subject']!r} version "
                                     f"{ref.get('version')}, which does not exist") from None
            resolved.append(Reference(ref["name"], target.subject, target.version))
        return tuple(resolved)

    def _reference_texts(self, references: tuple[Reference, ...]) -> dict[str, str]:
        """name -> schema text of every schema the references reach, theirs included."""
        texts: dict[str, str] = {}
        todo = list(references)
        while todo:
            ref = todo.pop()
            if ref.name in texts:
                continue
            target = self._subjects.get(ref.subject, {}).get(ref.version)
            if target is None:
                raise invalid_schema(f"reference {ref.name!r} to subject {ref.subject!r} version {ref.version} "
                                     "does not exist")
            texts[ref.name] = target.schema
            todo.extend(target.references)
        return texts

    def _checked(self, schema_type: str, schema: str, references: list) -> tuple[tuple, dict[str, str]]:
        """The identity of a schema sent (type, canonical text, references) and the texts its
        references reach; RegistryError 42201 if it is no schema."""
        if schema_type not in SCHEMA_TYPES:
            raise invalid_schema(f"unknown schema type {schema_type!r}: one of {', '.join(SCHEMA_TYPES)}")
        if not isinstance(schema, str):
            raise invalid_schema("the schema must be a string")
        size = len(json.dumps(schema))   # as the record carries it, escaped
        if size > self.max_schema_bytes:
            raise invalid_schema(f"the schema is {size} bytes as stored; a _schemas record holds at most "
                                 f"{self.max_schema_bytes} (message.max.bytes)")
        refs = self._resolve(references)
        texts = self._reference_texts(refs)
        try:
            canonical = parse(schema_type, schema, texts)
        except InvalidSchema as exc:   # its message is what 42201 reports
            raise RegistryError(422, 42201, str(exc)) from None
        return (schema_type, canonical, refs), texts

    def _problems(self, subject: str, schema_type: str, schema: str, texts: dict[str, str],
                  against: list[Version]) -> list[str]:
        """Why ``schema`` may not follow ``against`` (the texts as registered: a canonical form
        may leave out what compatibility depends on, such as Avro's defaults)."""
        level = self.compatibility(subject, default_to_global=True)
        if level == "NONE" or not against:
            return []
        if not level.endswith("_TRANSITIVE"):
            against = against[-1:]
        for previous in against:
            texts = {**self._reference_texts(previous.references), **texts}
        return incompatibilities(schema_type, schema, [v.schema for v in against], level, texts)

    def register(self, subject: str, schema_type: str, schema: str, references: list,
                 schema_id: int | None = None, number: int | None = None) -> int:
        """The id of the schema under the subject: the existing one if the subject has it, else a
        new version (with the id the same schema has under any subject, or a new one)."""
        self.catch_up()
        self._writable(subject)
        mode = self.mode(subject, default_to_global=True)
        if (schema_id is not None or number is not None) and mode != "IMPORT":
            raise not_permitted(f"Subject {subject} is not in import mode: a schema id or version cannot be given")
        identity, texts = self._checked(schema_type, schema, references)
        live = self._versions(subject, deleted=False)
        known = self._ids.get(identity)
        same = next((v for v in live if v.id == known), None)
        if same is not None and schema_id in (None, known):
            return same.id
        if mode == "IMPORT":
            new_id = schema_id or known or self._next_id
            other = self._by_id.get(new_id)
            if other is not None and self._canonical[new_id] != identity[1]:
                raise not_permitted(f"Overwrite new schema with id {new_id} is not permitted.")
        else:
            problems = self._problems(subject, schema_type, schema, texts, live)
            if problems:
                raise RegistryError(409, 409, f"Schema being registered is incompatible with an earlier schema for "
                                              f"subject \"{subject}\", details: {problems}")
            new_id = known or self._next_id
        every = self._subjects.get(subject, {})
        number = number or max(every, default=0) + 1
        if number in every:
            raise not_permitted(f"Subject {subject} already has a version {number}")
        value = Version(subject, number, new_id, schema_type, schema, identity[2], False, self.clock.now_ms())
        pairs = [(schema_key(subject, number), value.to_json())]
        if new_id >= self._next_id:
            pairs.append((ID_KEY, {"next": new_id + 1}))
        self._write(pairs)
        return new_id

    def lookup(self, subject: str, schema_type: str, schema: str, references: list, deleted: bool = False) -> Version:
        """The subject's version holding this schema (POST /subjects/{subject})."""
        self.catch_up()
        versions = self._versions(subject, deleted)
        if not versions:
            raise subject_not_found(subject)
        identity, _ = self._checked(schema_type, schema, references)
        found = [v for v in versions if v.id == self._ids.get(identity)]
        if not found:
            raise schema_not_found()
        return found[-1]

    def check(self, subject: str, number: int | None, schema_type: str, schema: str, references: list) -> list[str]:
        """Why the schema may not follow the subject's version ``number`` (LATEST: its newest;
        None: the versions its compatibility level compares with); empty if it may."""
        self.catch_up()
        _, texts = self._checked(schema_type, schema, references)
        if number is None or (number == LATEST and not self._versions(subject, False)):
            against = self._versions(subject, False)
        else:
            against = [self.version(subject, number)]
        return self._problems(subject, schema_type, schema, texts, against)

    # --- deletes ---------------------------------------------------------------------------------

    def _writable(self, subject: str) -> None:
        if self.mode(subject, default_to_global=True).startswith("READONLY"):
            raise not_permitted(f"Subject {subject} is in read-only mode")

    def _unreferenced(self, target: Version, permanent: bool) -> None:
        if any(permanent or not v.deleted for v in self._referrers(target)):
            raise RegistryError(422, 42206, f"One or more references exist to the schema "
                                            f"{{subject={target.subject}, version={target.version}}}.")

    def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        """Soft: every live version marked deleted. Permanent: every version gone, once soft-deleted."""
        self.catch_up()
        self._writable(subject)
        every = self._versions(subject, deleted=True)
        if not every:
            raise subject_not_found(subject)
        live = [v for v in every if not v.deleted]
        if permanent and live:
            raise RegistryError(404, 40405, f"Subject '{subject}' was not deleted first before being "
                                            "permanently deleted")
        if not permanent and not live:
            raise RegistryError(404, 40404, f"Subject '{subject}' was soft deleted. Set permanent=true to delete "
                                            "permanently")
        for version in every:
            self._unreferenced(version, permanent)
        if permanent:
            self._write([(schema_key(subject, v.version), None) for v in every]
                        + [(setting_key(k, subject), None) for k, values in self._settings.items() if subject in values])
            return [v.version for v in every]
        self._write([(schema_key(subject, v.version), {**v.to_json(), "deleted": True}) for v in live])
        return [v.version for v in live]

    def delete_version(self, subject: str, number: int, permanent: bool = False) -> int:
        self.catch_up()
        self._writable(subject)
        version = self.version(subject, number, deleted=True)
        if number == LATEST and not permanent:
            version = self.version(subject, LATEST)
        if permanent and not version.deleted:
            raise RegistryError(404, 40407, f"Subject '{subject}' Version {version.version} was not deleted first "
                                            "before being permanently deleted")
        if not permanent and version.deleted:
            raise RegistryError(404, 40406, f"Subject '{subject}' Version {version.version} was soft deleted. "
                                            "Set permanent=true to delete permanently")
        self._unreferenced(version, permanent)
        self._write([(schema_key(subject, version.version), None if permanent else {**version.to_json(),
                                                                                     "deleted": True})])
        return version.version

    # --- settings --------------------------------------------------------------------------------

    def set_setting(self, setting: Setting, subject: str | None, value: object, force: bool = False) -> str:
        self.catch_up()
        value = value.upper() if isinstance(value, str) else ""
        if value not in setting.allowed:
            raise RegistryError(422, setting.invalid, f"Invalid {setting.request_field}. Valid values are "
                                                      f"{', '.join(setting.allowed)}")
        if value == "IMPORT" and not force and (self.subjects() if subject is None else
                                                self._versions(subject, deleted=True)):
            raise not_permitted("Cannot import since found existing subjects")
        self._write([(setting_key(setting.keytype, subject), {setting.field: value})])
        return value

    def delete_setting(self, setting: Setting, subject: str | None) -> str:
        """Back to the registry's (a subject's), or to the default (the registry's); returns the old one."""
        previous = self.setting(setting, subject)
        self._write([(setting_key(setting.keytype, subject), None)])
        return previous
