"""What each pipeline must answer, computed in plain Python over the same events: the
yardstick the tests and the demo hold Spark's results to.

`admitted` is the watermark rule of `lateness.on_time` (which events count, how many are
dropped as too late); the other functions answer one pipeline each. Times are epoch
milliseconds; a result is emitted only once the final watermark has passed it.
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict

from headwater.pipelines.percolator import BadQuery, evaluate, parse_document, parse_query, words


def micro_batches(events: list, per_trigger: int) -> list[list]:
    """The micro-batches a query reads a one-partition topic in, with
    maxOffsetsPerTrigger = per_trigger (what `admitted` needs as its input)."""
    return [events[i:i + per_trigger] for i in range(0, len(events), per_trigger)]


def admitted(batches: list[list[dict]], lateness_ms: int, time_field: str = "ts_ms", id_field: str = "event_id"):
    """The rule `on_time` applies, in plain Python, to check a pipeline's answers:
    which events (dicts, in micro-batches as the query reads them) survive the
    watermark, how many are dropped as too late, and the final watermark.

    Spark's watermark after a batch is the largest event time seen minus the
    lateness; with a chain of stateful operators an event is dropped when its time is
    at or before the watermark of the *previous* batch (late-event watermark).
    Returns (kept events, dropped count, final watermark in ms).
    """
    kept, dropped, seen = [], 0, set()
    max_seen = None
    watermarks = [0]  # watermark in force for batch i (0 = none yet)
    for i, batch in enumerate(batches):
        late_watermark = watermarks[i - 1] if i >= 1 else 0
        for event in batch:
            if i >= 1 and late_watermark > 0 and event[time_field] <= late_watermark:
                dropped += 1
            elif event[id_field] not in seen:  # a repeated delivery is not counted twice
                seen.add(event[id_field])
                kept.append(event)
        times = [e[time_field] for e in batch]
        if times:
            max_seen = max([max_seen or times[0]] + times)
        watermarks.append(max(watermarks[-1], max_seen - lateness_ms) if max_seen is not None else 0)
    final_watermark = max_seen - lateness_ms  # what the last (no-data) batch runs with
    return kept, dropped, final_watermark


def window_counts(kept: list, final_watermark: int, size: int, slide: int | None = None) -> dict[int, int]:
    """Events per window start, for windows of `size` every `slide` (tumbling if equal)."""
    slide = slide or size
    counts = Counter()
    for e in kept:
        newest = e["ts_ms"] // slide * slide  # the last window holding the event starts here
        counts.update(range(newest - size + slide, newest + 1, slide))
    return {start: n for start, n in counts.items() if start + size <= final_watermark}


def late_events(kept: list) -> int:
    """Events older than one that arrived before them (late, yet counted)."""
    newest, late = None, 0
    for e in kept:
        late += newest is not None and e["ts_ms"] < newest
        newest = e["ts_ms"] if newest is None else max(newest, e["ts_ms"])
    return late


def sessions(kept: list, final_watermark: int, gap: int) -> dict[tuple, tuple]:
    """(user, start) -> (end, events): a session closes after `gap` without an event."""
    times = defaultdict(list)
    for e in kept:
        times[e["user_id"]].append(e["ts_ms"])
    out = {}
    for user, ts in times.items():
        runs = []
        for t in sorted(ts):
            if runs and t < runs[-1][-1] + gap:
                runs[-1].append(t)
            else:
                runs.append([t])
        out.update({(user, run[0]): (run[-1] + gap, len(run)) for run in runs if run[-1] + gap <= final_watermark})
    return out


def search_outcomes(searches: list, clicks: list, within: int, lateness: int) -> tuple[set, set]:
    """(search, click) pairs of a session with the click at most `within` after the
    search; and the searches without a click that the watermark (the smaller of the
    two streams') has closed."""
    pairs = {(s["event_id"], c["event_id"]) for s in searches for c in clicks
             if c["session_id"] == s["session_id"] and s["ts_ms"] <= c["ts_ms"] <= s["ts_ms"] + within}
    watermark = min(max(e["ts_ms"] for e in searches), max(e["ts_ms"] for e in clicks)) - lateness
    clicked = {s for s, _ in pairs}
    misses = {s["event_id"] for s in searches if s["event_id"] not in clicked and s["ts_ms"] + within < watermark}
    return pairs, misses


def click_through(searches: list, pairs: set, misses: set) -> dict[str, tuple]:
    """term -> (searches decided, searches with a click)."""
    clicked = {s for s, _ in pairs}
    rates = defaultdict(lambda: [0, 0])
    for s in searches:
        if s["event_id"] in clicked or s["event_id"] in misses:
            rates[s["term"]][0] += 1
            rates[s["term"]][1] += s["event_id"] in clicked
    return {term: tuple(n) for term, n in rates.items()}


def profiles_at_clicks(batches: list, lateness: int) -> dict[str, tuple]:
    """click id -> (user, time, profile in force then): `batches` mix clicks (kind 1)
    and profile changes (kind 0, `row` None for a deletion, `seq` its offset), which
    share one watermark; a change applies to clicks at its own instant."""
    kept, _, watermark = admitted(batches, lateness)
    out, profile = {}, {}
    for e in sorted(kept, key=lambda e: (e["ts_ms"], e["kind"], e.get("seq", 0))):
        if e["kind"] == 0:
            profile[e["user_id"]] = e["row"]
        elif e["ts_ms"] <= watermark:
            out[e["event_id"]] = (e["user_id"], e["ts_ms"], profile.get(e["user_id"]))
    return out


def card_testing(kept: list, final_watermark: int, window: int, failures: int = 3) -> set[tuple]:
    """(card, first failure, success, failures, payment id) for each success preceded
    by at least `failures` failed payments on the card within `window`."""
    matches, failed = set(), defaultdict(list)
    for e in sorted(kept, key=lambda e: (e["ts_ms"], e["event_id"])):
        if e["ts_ms"] > final_watermark:
            break
        recent = [t for t in failed[e["card_id"]] if t >= e["ts_ms"] - window]
        if e["status"] == "failed":
            failed[e["card_id"]] = recent + [e["ts_ms"]]
            continue
        if len(recent) >= failures:
            matches.add((e["card_id"], recent[0], e["ts_ms"], len(recent), e["event_id"]))
        failed[e["card_id"]] = []
    return matches


def revenue_per_product(orders: dict, products: dict) -> dict[str, tuple]:
    """product id -> (name, orders, revenue): the inner join of the two tables."""
    view = {}
    for order in orders.values():
        product = products.get(order["product_id"])
        if product is not None:
            _, n, revenue = view.get(order["product_id"], (None, 0, 0.0))
            view[order["product_id"]] = (product["name"], n + 1, revenue + order["quantity"] * product["price"])
    return view


def percolate(query_changes: list[tuple], documents: list[tuple]) -> tuple[set, set]:
    """The percolator as a naive loop: query_changes (ts, partition, offset, query id,
    value or None) and documents (ts, partition, offset, value). Each document meets
    every query as of its time (changes at or before it, in (ts, partition, offset)
    order; an invalid change leaves the query as it was). Returns the matches (query
    id, partition, offset) and the rejects (partition, offset, query id or '') of the
    documents topic."""
    changes = []
    for ts, partition, offset, query_id, value in sorted(query_changes):
        try:
            changes.append((ts, query_id, value and parse_query(value)))
        except BadQuery:
            pass
    matches, rejects = set(), set()
    for ts, partition, offset, value in documents:
        live = {}
        for changed, query_id, query in changes:
            if changed > ts:
                break
            live[query_id] = query
        try:
            doc = parse_document(value)
        except ValueError:
            rejects.add((partition, offset, ""))
            continue
        found, mismatches = evaluate(((q, query) for q, query in live.items() if query is not None), doc)
        matches |= {(q, partition, offset) for q in found}
        rejects |= {(partition, offset, q) for q, _ in mismatches}
    return matches, rejects


def table_from_changes(changes: list[tuple]) -> dict[str, dict]:
    """The table a CDC topic's (key, value) records in log order leave: key -> row after."""
    table = {}
    for key, value in changes:
        event = value and json.loads(value)
        if event is None or event["op"] == "d":
            table.pop(key, None)
        else:
            table[key] = event["after"]
    return table


def text_search(rows: dict[str, dict], fields: list[str], word: str) -> set[str]:
    """What a full-text index answers: keys of the rows with `word` in one of `fields`."""
    return {key for key, row in rows.items()
            if any(word.lower() in words(str(row[f])) for f in fields if row.get(f) is not None)}
