"""The ``__share_group_state`` topic as a reader sees it: its name and the records a persisted
share-partition state lists. Shared by the broker's store and `headwater groups` (a consumer of
the topic, which must not import the broker's storage layer to read it)."""
from __future__ import annotations

from collections.abc import Iterator

STATE_TOPIC = "__share_group_state"


def record_states(state: dict) -> Iterator[tuple[int, int, int]]:
    """(offset, state, delivery count) of each record a persisted state lists, in either form."""
    for first, last, state_value, count in state.get("ranges", ()):
        for offset in range(int(first), int(last) + 1):
            yield offset, state_value, count
    yield from state.get("records", ())
