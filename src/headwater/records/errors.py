"""The two ways a record batch is refused: corrupt (framing, magic, CRC: it may have been
damaged on the way, so a retry can help) or invalid (sealed by its producer but against the format)."""
from __future__ import annotations


class CorruptRecordError(ValueError):
    """A batch whose framing, magic or CRC is wrong."""


class InvalidRecordError(CorruptRecordError):
    """A batch that arrived as its producer sealed it (the CRC holds) but breaks the format:
    its records, codec or counts. Sending it again cannot help, unlike a CRC mismatch.
    ``record_errors`` names the offending records, (index in the batch, why), when only some
    are (KIP-467), so clients fail those and not their neighbours."""

    def __init__(self, message: str, record_errors: list[tuple[int, str]] | None = None):
        super().__init__(message)
        self.record_errors = record_errors or []
