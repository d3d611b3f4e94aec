"""Change data capture: PostgreSQL (logical decoding, pgoutput) and SQLite (triggers)."""


class CdcError(Exception):
    """A problem the user must fix (bad DSN, missing table, wal_level...): one line, no traceback."""


class SourceUnavailable(CdcError):
    """The source database cannot be reached (wrong address, or down for a while)."""
