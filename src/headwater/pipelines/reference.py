"""What each pipeline must answer, computed in plain Python over the same events: the
yardstick the tests and the demo hold Spark's results to.

`admitted` is the watermark rule of `lateness.on_time` (which events count, how many are
dropped as too late); the other functions answer one pipeline each. Times are epoch
milliseconds; a result is emitted only once the final watermark has passed it.
"""
from __future__ import annotations

import bisect
import json
import math
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


def window_events(kept: list, final_watermark: int, size: int, slide: int | None = None) -> dict[int, list]:
    """The events of each closed window, by window start, for windows of `size` every
    `slide` (tumbling if equal)."""
    slide = slide or size
    held = defaultdict(list)
    for e in kept:
        newest = e["ts_ms"] // slide * slide  # the last window holding the event starts here
        for start in range(newest - size + slide, newest + 1, slide):
            held[start].append(e)
    return {start: events for start, events in held.items() if start + size <= final_watermark}


def window_counts(kept: list, final_watermark: int, size: int, slide: int | None = None) -> dict[int, int]:
    """Events per window start, for windows of `size` every `slide` (tumbling if equal)."""
    return {start: len(events) for start, events in window_events(kept, final_watermark, size, slide).items()}


def batch_of(batches: list[list[dict]]) -> dict[str, int]:
    """event id -> the micro-batch it was first read in."""
    found = {}
    for i, batch in enumerate(batches):
        for e in batch:
            found.setdefault(e["event_id"], i)
    return found


def window_stats(kept: list, final_watermark: int, size: int, slide: int, value: str, key: str,
                 batch_of: dict[str, int]) -> dict[int, dict]:
    """window start -> events, per_second, mean of `value`, its values sorted, the
    micro-batches that brought them (each one a partial summary merged into the
    window's: for `within_rank_error`) and the exact number of distinct `key`s."""
    out = {}
    for start, events in window_events(kept, final_watermark, size, slide).items():
        values = sorted(e[value] for e in events)
        out[start] = {"events": len(events), "per_second": len(events) / (size / 1000),
                      "mean": math.fsum(values) / len(values), "sorted": values,
                      "summaries": len({batch_of[e["event_id"]] for e in events}),
                      "distinct_keys": len({e[key] for e in events})}
    return out


def percentile_rank(n: int, p: float) -> int:
    """The exact percentile's rank (1-based) among n sorted values: the smallest value
    with at least p of the values at or below it."""
    return math.ceil(p * n)


def within_rank_error(sorted_values: list, found, p: float, accuracy: int, summaries: int = 1) -> bool:
    """Whether `found` is one of the values and one of its ranks (1-based; several when
    repeated) lies within summaries * n/accuracy of the exact percentile's rank: the
    bound of percentile_approx for a summary built in one pass (summaries=1); merging
    and compressing a partial summary may add up to n/accuracy each time."""
    n = len(sorted_values)
    first, last = bisect.bisect_left(sorted_values, found) + 1, bisect.bisect_right(sorted_values, found)
    slack = summaries * n / accuracy
    return first <= last and first - slack <= percentile_rank(n, p) <= last + slack


def top_keys(kept: list, final_watermark: int, size: int, key: str, k: int) -> dict[int, list[tuple]]:
    """window start -> the k (key, events) with most events, ties broken by key."""
    return {start: sorted(Counter(e[key] for e in events).items(), key=lambda kv: (-kv[1], kv[0]))[:k]
            for start, events in window_events(kept, final_watermark, size).items()}


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


def corrected_windows(batches: list[list[dict]], size: int, lateness: int, delay: int) -> list[tuple]:
    """The rule of `clocks.corrected_windows` over device readings (event_ms, sent_ms,
    received_ms) in micro-batches: rows (device, window start, kind, events, revision,
    offset estimate) with kind "result", "correction" or "too-late"."""
    offsets, windows, out = {}, {}, []  # windows: (device, start) -> [events, revision]
    watermark, newest = 0, None
    for batch in batches + [[]]:  # the last micro-batch has no data: it only moves the watermark
        by_device = defaultdict(list)
        for e in batch:
            by_device[e["device_id"]].append(e)
        for device, events in by_device.items():
            offset = offsets[device] = min([offsets.get(device, math.inf)]
                                           + [e["received_ms"] - e["sent_ms"] for e in events])
            too_late, touched = Counter(), set()
            for e in events:
                start = (e["event_ms"] + offset) // size * size
                if start + size + lateness <= watermark:
                    too_late[start] += 1
                else:
                    windows.setdefault((device, start), [0, -1])[0] += 1
                    touched.add(start)
            out += [(device, start, "too-late", n, None, offset) for start, n in too_late.items()]
            for start in touched:
                window = windows[(device, start)]
                if start + size <= watermark:
                    window[1] += 1
                    out.append((device, start, "result" if window[1] == 0 else "correction", *window, offset))
        for (device, start), window in list(windows.items()):
            if window[1] == -1 and start + size <= watermark:
                window[1] = 0
                out.append((device, start, "result", *window, offsets[device]))
            if start + size + lateness <= watermark:
                del windows[(device, start)]
        if batch:
            newest = max([newest or 0] + [e["received_ms"] for e in batch])
            watermark = max(watermark, newest - delay)
    return out


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
