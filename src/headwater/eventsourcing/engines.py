"""The storage engines, chosen by location: above the store's contract and both engines,
so the contract knows none of them (and PostgreSQL's driver loads only for a PostgreSQL store)."""
from __future__ import annotations

from headwater.eventsourcing.mapper import Mapper
from headwater.eventsourcing.store import EventStore


def open_store(location: str, **mapping) -> EventStore:
    """A PostgreSQL store for a `postgresql://` URL or a libpq `key=value` string, else a SQLite
    file. `mapping`: how events become records (`Mapper`: upcasters, personal, event_types)."""
    mapper = Mapper(**mapping)
    if location.startswith(("postgresql://", "postgres://")) or "dbname=" in location or "host=" in location:
        from headwater.eventsourcing.postgres_store import PostgresEventStore
        return PostgresEventStore(location, mapper=mapper)
    from headwater.eventsourcing.sqlite_store import SqliteEventStore
    return SqliteEventStore(location.removeprefix("sqlite:///"), mapper=mapper)
