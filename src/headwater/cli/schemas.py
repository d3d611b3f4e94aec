"""`headwater schemas`: the schema registry of a broker's HTTP listener (its Confluent Schema
Registry API): list subjects, show a version, check a schema file's compatibility with a
subject, register one.

The registry is at ``--url`` (the broker's ``--http-listener``). On a secured broker the
listener asks for a user of the broker: the ``sasl.username`` and ``sasl.password`` of
``--command-config`` log in (HTTP Basic), and its ``ssl.ca.location`` verifies an https URL.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

from headwater.cli.common import CommandError, client_properties, confirm, emit, print_json

DEFAULT_URL = "http://127.0.0.1:8080"
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
TYPES = {".avsc": "AVRO", ".proto": "PROTOBUF", ".json": "JSON"}
TIMEOUT_S = 30


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("schemas", help="the schema registry: subjects, versions, compatibility")
    sub = p.add_subparsers(dest="schemas_command", required=True)
    listing = sub.add_parser("list", help="every subject with its latest version")
    listing.add_argument("--deleted", action="store_true", help="soft-deleted subjects too")
    listing.set_defaults(func=list_subjects)
    show = sub.add_parser("show", help="one version of a subject: its id, type, references and schema")
    show.add_argument("subject")
    show.add_argument("--version", default="latest", help="a version number or latest (default)")
    show.set_defaults(func=show_version)
    check = sub.add_parser("check", help="is a schema file compatible with a subject? (exit 1 if not)")
    register = sub.add_parser("register", help="register a schema file under a subject; prints its id")
    for command in (check, register):
        command.add_argument("subject")
        command.add_argument("file", type=Path, help="the schema: .avsc Avro, .proto Protobuf, .json JSON Schema")
        command.add_argument("--type", choices=sorted(set(TYPES.values())), help="the schema type, if the file's "
                             "extension does not say it")
        command.add_argument("--reference", action="append", default=[], metavar="NAME=SUBJECT:VERSION",
                             type=_reference, help="a schema it references, repeatable")
    check.add_argument("--version", default="all", help="compare with this version, latest, or all (default: "
                                                        "the versions the subject's compatibility level names)")
    check.set_defaults(func=check_schema)
    register.set_defaults(func=register_schema)
    for command in (listing, show, check, register):
        command.add_argument("--url", default=os.environ.get("HEADWATER_REGISTRY_URL", DEFAULT_URL),
                             help="the broker's HTTP listener (default: $HEADWATER_REGISTRY_URL, then %(default)s)")
        command.add_argument("--command-config", type=client_properties, default={}, metavar="FILE",
                             help="sasl.username and sasl.password to log in with, ssl.ca.location for https")
        command.add_argument("--json", action="store_true", help="print JSON for scripts instead of a table")


def _reference(text: str) -> dict:
    name, _, target = text.partition("=")
    subject, _, version = target.rpartition(":")
    if not (name and subject and (version.isdigit() or version == "latest")):
        raise argparse.ArgumentTypeError(f"a reference is NAME=SUBJECT:VERSION, got {text!r}")
    return {"name": name, "subject": subject, "version": -1 if version == "latest" else int(version)}


class Registry:
    """The registry's REST API, its errors as one-line CommandErrors."""

    def __init__(self, args):
        self.url = args.url.rstrip("/") + "/"
        properties = args.command_config
        self.headers = {"Accept": CONTENT_TYPE}
        if "sasl.username" in properties:
            login = f"{properties['sasl.username']}:{properties.get('sasl.password', '')}"
            self.headers["Authorization"] = "Basic " + base64.b64encode(login.encode()).decode()
        self.tls = ssl.create_default_context(cafile=properties.get("ssl.ca.location"))

    def call(self, method: str, path: str, body: dict | None = None):
        data = None if body is None else json.dumps(body).encode()
        headers = self.headers if data is None else {**self.headers, "Content-Type": CONTENT_TYPE}
        request = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=self.tls
                                        if self.url.startswith("https") else None) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as error:
            raise CommandError(_error(error)) from None
        except (urllib.error.URLError, OSError) as exc:
            raise CommandError(f"cannot reach the schema registry at {self.url}: "
                               f"{getattr(exc, 'reason', exc)}") from None


def _error(error: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(error.read())
        return f"{body['message']} (error {body['error_code']})"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {error.code} {error.reason}"


def _subject(name: str) -> str:
    return "subjects/" + quote(name, safe="")


def list_subjects(args) -> int:
    registry = Registry(args)
    rows = []
    for subject in registry.call("GET", "subjects" + ("?deleted=true" if args.deleted else "")):
        versions = registry.call("GET", _subject(subject) + "/versions?deleted=true")
        latest = registry.call("GET", f"{_subject(subject)}/versions/{versions[-1]}?deleted=true")
        rows.append({"subject": subject, "versions": len(versions), "latest": latest["version"], "id": latest["id"],
                     "type": latest.get("schemaType", "AVRO")})
    emit(args, rows, title="subjects")
    return 0


def show_version(args) -> int:
    found = Registry(args).call("GET", f"{_subject(args.subject)}/versions/{quote(args.version, safe='')}")
    # the CLI's one JSON shape (snake_case keys, `type` as `schemas list` says it), not the REST API's
    found = {"subject": found["subject"], "version": found["version"], "id": found["id"],
             "type": found.get("schemaType", "AVRO"), "schema": found["schema"],
             "references": found.get("references", [])}
    if args.json:
        print_json(found)
        return 0
    references = ", ".join(f"{r['name']} ({r['subject']} v{r['version']})" for r in found["references"])
    print(f"subject {found['subject']}  version {found['version']}  id {found['id']}  type {found['type']}"
          + (f"  references {references}" if references else ""))
    print(_pretty(found["schema"]))
    return 0


def _pretty(schema: str) -> str:
    try:
        return json.dumps(json.loads(schema), indent=2, ensure_ascii=False)
    except ValueError:
        return schema


def _schema(args) -> dict:
    schema_type = args.type or TYPES.get(args.file.suffix.lower())
    if schema_type is None:
        raise CommandError(f"cannot tell the schema type of {args.file} from its extension: give --type")
    try:
        text = args.file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"cannot read {args.file}: {exc}") from None
    return {"schema": text, "schemaType": schema_type, "references": args.reference}


def check_schema(args) -> int:
    versions = "versions" if args.version == "all" else f"versions/{quote(args.version, safe='')}"
    verdict = Registry(args).call("POST", f"compatibility/{_subject(args.subject)}/{versions}?verbose=true",
                                  _schema(args))
    if args.json:
        print_json(verdict)
    else:
        against = args.subject + ("" if args.version == "all" else f" version {args.version}")
        verdict_line = "is compatible with" if verdict["is_compatible"] else "is not compatible with"
        print(f"{args.file} {verdict_line} {against}", *verdict.get("messages", []), sep="\n  ")
    return 0 if verdict["is_compatible"] else 1


def register_schema(args) -> int:
    registry = Registry(args)
    schema = _schema(args)
    schema_id = registry.call("POST", _subject(args.subject) + "/versions", schema)["id"]
    version = registry.call("POST", _subject(args.subject), schema)["version"]
    confirm(args, f"{args.file} is id {schema_id}, version {version} of {args.subject}",
            [{"subject": args.subject, "version": version, "id": schema_id}])
    return 0
