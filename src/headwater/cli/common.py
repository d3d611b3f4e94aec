"""Conventions every command shares: argument types, where the broker is, tables or JSON, one-line errors."""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from rich.console import Console
from rich.table import Table

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_TIMEOUT_MS = 5000  # kafka-python's own default waits 30 s for a broker that is not there


class CommandError(Exception):
    """A problem to report to the user in one line (no traceback), exit status 1."""


def add_client_args(parser) -> None:
    add_connection_args(parser)
    parser.add_argument("--json", action="store_true", help="print JSON for scripts instead of a table")


def add_connection_args(parser) -> None:
    """Where the broker is and how to log in to it."""
    parser.add_argument("--bootstrap-server", default=os.environ.get("HEADWATER_BOOTSTRAP", DEFAULT_BOOTSTRAP),
                        help="broker address HOST:PORT (default: $HEADWATER_BOOTSTRAP, then %(default)s)")
    parser.add_argument("--command-config", type=client_properties, default={}, metavar="FILE",
                        help="client properties for a secured broker (security.protocol, sasl.mechanism, "
                             "sasl.username, sasl.password, ssl.ca.location, ... in librdkafka's names)")


def add_schema_registry_arg(parser, what: str) -> None:
    parser.add_argument("--schema-registry", metavar="URL",
                        help=f"write Avro ({what}) instead of JSON, its schema in the registry at URL (a broker's "
                             "HTTP listener); it logs in as http://USER:PASSWORD@HOST:PORT/ says, else as "
                             "--command-config's sasl.username and sasl.password")


def registry_config(url: str | None, properties: dict[str, str]) -> dict[str, str]:
    """The schema registry client's properties from the broker's client properties: a secured
    broker's HTTP listener takes the same user (HTTP Basic, as `headwater schemas` logs in), its
    CA file verifies https. A login in the URL wins (confluent-kafka's client refuses both)."""
    config = {}
    if url and "@" not in url.partition("://")[2].partition("/")[0] and "sasl.username" in properties:
        config["basic.auth.user.info"] = f"{properties['sasl.username']}:{properties.get('sasl.password', '')}"
    if "ssl.ca.location" in properties:
        config["ssl.ca.location"] = properties["ssl.ca.location"]
    if url:
        _require_registry(url, config)
    return config


def _require_registry(url: str, config: dict[str, str]) -> None:
    """One request at the start, so that a wrong URL, a login refused or a registry that is down
    is one line now rather than a traceback from the HTTP client at the first record."""
    from headwater.schemas.avro_records import registry_client

    try:
        registry_client(url, config).get_subjects()
    except Exception as exc:  # the client's own and its HTTP library's errors alike
        raise CommandError(f"the schema registry at {url} does not answer: {exc}") from exc


def name_value(text: str) -> tuple[str, str]:
    """A NAME=VALUE argument (a config, a client property, a parameter), both sides stripped."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value.strip()


def _number(text: str, kind: type[int] | type[float]) -> int | float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, "
                                         f"got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_int(text: str) -> int:
    value = _number(text, int)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def non_negative_int(text: str) -> int:
    value = _number(text, int)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {text}")
    return value


def positive_float(text: str) -> float:
    value = _number(text, float)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def data_dir(text: str) -> Path:
    """A data directory argument: one that does not exist yet is made when needed, a file is refused."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a directory")
    return path


def client_properties(path: str) -> dict[str, str]:
    """A Kafka client properties file: ``name=value`` lines, ``#`` or ``!`` comments."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {path}: {exc.strerror}") from None
    properties = {}
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        name, sep, value = line.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"{path}:{number}: expected name=value, got {line!r}")
        properties[name.strip()] = value.strip()
    return properties


def client_config(args, **extra) -> dict:
    """librdkafka configuration for ``args``: the broker address and the --command-config properties."""
    return {"bootstrap.servers": args.bootstrap_server, **getattr(args, "command_config", {}),
            "error_cb": _refused, "logger": _client_log, **extra}


# librdkafka logs each failed connection to stderr; commands report failures themselves, in one line
_client_log = logging.getLogger("headwater.cli.client")
_client_log.addHandler(logging.NullHandler())
_client_log.propagate = False


def _refused(error: KafkaError) -> None:
    """A refused login is final: report it rather than the retries' 'cannot reach a broker'."""
    if error.code() == KafkaError._AUTHENTICATION:
        raise CommandError(error.str())


ADMIN_TIMEOUT = 30  # seconds for an AdminClient call's answer
_POLL_S = 0.05     # how often a wait for an answer serves the client's callbacks


def answer(admin, future, timeout: float = ADMIN_TIMEOUT):
    """An AdminClient future's result (its KafkaException as raised), serving the client's callbacks
    while it waits: a refused login reaches ``error_cb`` only through ``poll``, and so ends the wait at
    once instead of after ``timeout``. No answer in time is a one-line CommandError."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return future.result(min(_POLL_S, max(deadline - time.monotonic(), 0)))
        except TimeoutError:
            if time.monotonic() >= deadline:
                raise CommandError(f"no answer within {timeout:g}s: is the broker there, and does it accept "
                                   "the --command-config login?") from None
            admin.poll(0)


def admin_result(admin, future, timeout: float = ADMIN_TIMEOUT, what: str | None = None):
    """``answer``, with the call's failure as a one-line CommandError (after ``what: `` if given)."""
    try:
        return answer(admin, future, timeout)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        failure = error.str() if isinstance(error, KafkaError) else str(exc)
        raise CommandError(f"{what}: {failure}" if what else failure) from None


# kafka-python's names for the librdkafka properties a secured connection needs
KAFKA_PYTHON_NAMES = {"security.protocol": "security_protocol", "sasl.mechanism": "sasl_mechanism",
                      "sasl.username": "sasl_plain_username", "sasl.password": "sasl_plain_password",
                      "ssl.ca.location": "ssl_cafile", "ssl.certificate.location": "ssl_certfile",
                      "ssl.key.location": "ssl_keyfile", "ssl.key.password": "ssl_password"}


def kafka_python_config(args) -> dict:
    """kafka-python keyword arguments for the --command-config properties; ones it has no name for are an error."""
    properties = getattr(args, "command_config", {})
    unknown = sorted(set(properties) - set(KAFKA_PYTHON_NAMES))
    if unknown:
        raise CommandError(f"this command cannot use {', '.join(unknown)} from --command-config")
    config = {KAFKA_PYTHON_NAMES[name]: value for name, value in properties.items()}
    if "security_protocol" in config:
        config["security_protocol"] = config["security_protocol"].upper()
    return config


def kafka_python_admin(args, client_id: str = "headwater-cli"):
    """kafka-python's admin client for ``args`` (for the APIs confluent-kafka's lacks); an
    unreachable broker is a CommandError."""
    from kafka import KafkaAdminClient  # the commands that use it import kafka-python; the others need not
    from kafka.errors import KafkaError as KafkaPythonError

    try:
        return KafkaAdminClient(bootstrap_servers=args.bootstrap_server, **kafka_python_config(args),
                                client_id=client_id, request_timeout_ms=30000,
                                bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS)
    except KafkaPythonError as exc:
        raise CommandError(_refused_login(args) or f"cannot reach a broker at {args.bootstrap_server}: {exc}") from None


def _refused_login(args) -> str | None:
    """The refused login behind kafka-python's failed bootstrap, if that is what it was: kafka-python
    retries a refused SASL login until its bootstrap times out and then reports no broker at all."""
    from headwater.protocol.request import AuthenticationFailed, Connection, UnsupportedSecurity, security_properties

    try:
        security = security_properties(getattr(args, "command_config", {}))
        Connection(args.bootstrap_server.split(",")[0].strip(), BOOTSTRAP_TIMEOUT_MS / 1000, security=security).close()
    except AuthenticationFailed as exc:
        return f"SASL authentication error: {exc}"
    except (UnsupportedSecurity, OSError, ValueError):
        pass   # not a refused login: the broker is not there, or this client cannot tell
    return None


# --- output: a table on a terminal, plain complete text in a pipe, one JSON shape with --json ---

Rows = list[dict]


def emit(args, rows: Rows, title: str | None = None) -> None:
    """Print row-shaped results: a JSON list of objects with --json, else a table (see _print_table)."""
    if getattr(args, "json", False):
        print_json(rows)
    else:
        _print_table(rows, title, titled=False)


def emit_document(args, document: dict, sections: list[tuple[str, Rows]]) -> None:
    """Print a described thing: ``document`` as one JSON object with --json, else a table per section."""
    if getattr(args, "json", False):
        print_json(document)
        return
    for number, (title, rows) in enumerate(sections):
        if number and not _on_terminal():
            sys.stdout.write("\n")
        _print_table(rows, title, titled=True)


def confirm(args, message: str, rows: Rows) -> None:
    """Report a change: a sentence for a person, or with --json the rows changed."""
    if getattr(args, "json", False):
        print_json(rows)
    else:
        print(message)


def print_json(value) -> None:
    json.dump(value, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def _print_table(rows: Rows, title: str | None, titled: bool) -> None:
    """On a terminal a rich table whose cells wrap rather than being cut; in a pipe a header line
    and one line per row, tab-separated and whole, so grep, cut and awk -F'\t' see every value
    (a section's title on a '# ' line first when the command prints several)."""
    columns = list(rows[0]) if rows else []
    if not _on_terminal():
        if titled and title:
            sys.stdout.write(f"# {title}\n")
        for line in ([columns] if columns else []) + [[_cell(row.get(c), "-") for c in columns] for row in rows]:
            sys.stdout.write("\t".join(line) + "\n")
        return
    table = Table(title=title)
    for column in columns:
        numeric = isinstance(rows[0][column], (int, float)) and not isinstance(rows[0][column], bool)
        table.add_column(column, justify="right" if numeric else "left", overflow="fold")
    for row in rows:
        table.add_row(*(_cell(row.get(c), "") for c in columns))
    Console().print(table if rows else f"{title or 'result'}: none")


def _on_terminal() -> bool:
    """stdout is a terminal; rich's TTY_COMPATIBLE=1 (or 0) says otherwise, e.g. for a demo that
    captures a command's table to show it."""
    forced = os.environ.get("TTY_COMPATIBLE")
    return forced == "1" if forced in ("0", "1") else sys.stdout.isatty()


def _cell(value, missing: str) -> str:
    """A value as a table shows it: lists comma-separated, whole numbers without '.0', no tabs or newlines."""
    if value is None:
        return missing
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, tuple)):
        return ",".join(_cell(v, missing) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value).replace("\t", " ").replace("\n", " ")
