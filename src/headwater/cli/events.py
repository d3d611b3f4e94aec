"""`headwater events append|read|streams|tail|relay` and `headwater projections status|rebuild NAME|skipped NAME`.

The store is a SQLite file or a PostgreSQL URL/DSN (`--store`, default $HEADWATER_EVENT_STORE,
then ./events.db). `--app MODULE` names the application's module, which may define
PROJECTIONS (projection classes), PERSONAL (PersonalData), UPCASTERS (Upcasters) and
EVENT_TYPES (EventTypes: then appends are checked against the application's event classes).
"""
from __future__ import annotations

import functools
import importlib
import json
import os
import time

from headwater.cli.common import CommandError, add_connection_args, add_schema_registry_arg, emit, registry_config
from headwater.cli.long_running import StopRequest, command_log
from headwater.eventsourcing import ANY, EventStoreError, NewEvent, RecordedEvent, open_store
from headwater.eventsourcing.projection import ProjectionRunner, skipped_events, statuses
from headwater.waiting import Stopped


def add_parser(subparsers) -> None:
    events = subparsers.add_parser("events", help="an event store: append, read, list streams, tail, relay")
    actions = events.add_subparsers(dest="events_action", required=True)

    append = actions.add_parser("append", help="append one event to a stream")
    append.add_argument("stream")
    append.add_argument("type", help="event type name")
    append.add_argument("data", nargs="?", default="{}", help="event body, a JSON object (default {})")
    append.add_argument("--expected-version", type=int, default=ANY,
                        help="fail unless the stream is at this version (0: a new stream)")
    append.add_argument("--schema-version", type=int, default=1)
    append.add_argument("--event-id", help="idempotency key: appending the same id again writes nothing")
    append.set_defaults(func=_store_command(append_event))

    read = actions.add_parser("read", help="read a stream's events")
    read.add_argument("stream")
    read.add_argument("--from-version", type=int, help="first version (backwards: last version) to read")
    read.add_argument("--backwards", action="store_true", help="newest first")
    read.add_argument("--limit", type=int)
    read.set_defaults(func=_store_command(read_stream))

    streams = actions.add_parser("streams", help="list streams and their versions")
    streams.set_defaults(func=_store_command(list_streams))

    tail = actions.add_parser("tail", help="print every event from a global position on, as JSON lines, following new ones")
    tail.add_argument("--from-position", type=int, default=0, help="start after this global position")
    tail.add_argument("--no-follow", action="store_true", help="stop at the end instead of waiting for more")
    tail.set_defaults(func=_store_command(tail_events))

    relay = actions.add_parser("relay", help="publish the store's events to a topic, keyed by stream (outbox relay)")
    relay.add_argument("--topic", required=True)
    relay.add_argument("--partitions", type=int, default=3, help="partitions if the topic is created (default 3)")
    add_schema_registry_arg(relay, "the stored row's schema, registered as <topic>-value")
    add_connection_args(relay)
    relay.set_defaults(func=_store_command(run_relay), waits_for_broker=True)

    projections = subparsers.add_parser("projections", help="read models: status, rebuild from the log")
    p_actions = projections.add_subparsers(dest="projections_action", required=True)
    status = p_actions.add_parser("status", help="each projection's checkpoint, how far behind it is, events skipped")
    status.set_defaults(func=_store_command(projection_status))
    skipped = p_actions.add_parser("skipped", help="the events a projection's code failed on and skipped, and why")
    skipped.add_argument("name", help="the projection's name")
    skipped.set_defaults(func=_store_command(list_skipped))
    rebuild = p_actions.add_parser("rebuild", help="replay the log into a fresh view and swap it in")
    rebuild.add_argument("name", help="the projection's name (from the --app module's PROJECTIONS)")
    rebuild.add_argument("--batch-size", type=int, default=1000)
    rebuild.set_defaults(func=_store_command(rebuild_projection))

    for parser in (append, read, streams, tail, relay, status, rebuild, skipped):
        parser.add_argument("--store", default=os.environ.get("HEADWATER_EVENT_STORE", "events.db"),
                            help="SQLite file or PostgreSQL URL (default: $HEADWATER_EVENT_STORE, then %(default)s)")
        parser.add_argument("--app", default=os.environ.get("HEADWATER_EVENTS_APP"),
                            help="module defining PROJECTIONS, PERSONAL, UPCASTERS and EVENT_TYPES "
                                 "(default: $HEADWATER_EVENTS_APP)")
    for parser in (read, streams, status, skipped):
        parser.add_argument("--json", action="store_true", help="print JSON for scripts instead of a table")


def _app(args):
    if not args.app:
        return None
    try:
        return importlib.import_module(args.app)
    except ImportError as exc:
        raise CommandError(f"cannot import --app {args.app}: {exc}") from None


def _store_command(command):
    """Open the store the arguments name, run `command(args, store)`, report store errors in one line."""
    @functools.wraps(command)
    def run(args) -> int:
        app = _app(args)
        options = {name.lower(): getattr(app, name) for name in ("PERSONAL", "UPCASTERS", "EVENT_TYPES")
                   if hasattr(app, name)}
        try:
            store = open_store(args.store, **options)
        except Exception as exc:  # a wrong path or URL: say which
            first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise CommandError(f"cannot open event store {args.store!r}: {first_line}") from None
        try:
            return command(args, store, app)
        except EventStoreError as exc:
            raise CommandError(str(exc)) from None
        finally:
            store.close()
    return run


def _row(event: RecordedEvent) -> dict:
    return {"position": event.position, "stream": event.stream_id, "version": event.version, "type": event.type,
            "schema_version": event.schema_version, "data": event.data, "event_id": event.event_id}


def append_event(args, store, _app) -> int:
    try:
        data = json.loads(args.data)
    except ValueError as exc:
        raise CommandError(f"event body is not JSON: {exc}") from None
    event = NewEvent(args.type, data, args.schema_version, **({"event_id": args.event_id} if args.event_id else {}))
    version = store.append(args.stream, [event], args.expected_version)
    print(f"{args.stream} is at version {version}")
    return 0


def read_stream(args, store, _app) -> int:
    events = store.read_stream(args.stream, args.from_version, args.backwards, args.limit)
    emit(args, [_row(e) for e in events], title=args.stream)
    return 0


def list_streams(args, store, _app) -> int:
    emit(args, [{"stream": s, "version": v} for s, v in store.streams()], title="streams")
    return 0


def tail_events(args, store, _app) -> int:
    position = args.from_position
    stopping = StopRequest()
    while not stopping():
        events = store.read_all(position, 1000)
        for event in events:
            print(json.dumps(_row(event)), flush=True)
        if events:
            position = events[-1].position
        elif args.no_follow:
            break
        else:
            time.sleep(0.2)
    return stopping.exit_status()


def run_relay(args, store, _app) -> int:
    from headwater.eventsourcing.relay import OutboxRelay, RelayError
    from headwater.eventsourcing.row_formats import row_format

    stopping = StopRequest()
    say = command_log("events relay")
    try:
        relay = OutboxRelay(store, args.bootstrap_server, args.topic, args.partitions, security=args.command_config,
                            should_stop=stopping, on_wait=say,
                            rows=row_format(args.topic, args.schema_registry,
                                            registry_config(args.schema_registry, args.command_config)))
        say(f"publishing to {args.topic} from position {relay.position}")
        relay.run()
    except Stopped:
        pass
    except RelayError as exc:
        raise CommandError(f"{exc} (a rerun resumes after what the topic holds)") from None
    return stopping.exit_status()


def projection_status(args, store, app) -> int:
    emit(args, statuses(store, [p.name for p in getattr(app, "PROJECTIONS", [])]), title="projections")
    return 0


def list_skipped(args, store, _app) -> int:
    emit(args, skipped_events(store, args.name), title=f"events {args.name} skipped")
    return 0


def rebuild_projection(args, store, app) -> int:
    known = {p.name: p for p in getattr(app, "PROJECTIONS", [])}
    if args.name not in known:
        raise CommandError(f"no projection named {args.name!r} in --app {args.app or '(none given)'}; "
                           f"known: {', '.join(sorted(known)) or 'none'}")
    started = time.monotonic()
    replayed = ProjectionRunner(store, known[args.name]()).rebuild(args.batch_size)
    print(f"{args.name}: rebuilt from {replayed} events in {time.monotonic() - started:.2f} s and swapped in")
    skipped = len(skipped_events(store, args.name))
    if skipped:
        print(f"{args.name}: its code failed on {skipped} event(s), skipped: headwater projections skipped {args.name}")
    return 0
