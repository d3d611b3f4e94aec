"""The events of the analytics chapter, from seeded generators (the same events in every run).

`page_views`: a site's page views with the time each took to serve, a few pages far
more popular than the rest, arriving mostly in order, some late, a few far too late.
`device_readings`: sensors whose clocks are off by up to minutes, each event carrying
the device's event and send times and the broker's receive time; three devices go
offline and send their backlog later (stragglers), one long after its windows closed.
"""
from __future__ import annotations

import random

from headwater.demo.shop_events import BASE_MS, MINUTE

PAGES = ("/", "/search", "/product", "/cart", "/checkout", "/account", "/help", "/about")
PAGE_WEIGHTS = (30, 25, 20, 10, 6, 5, 3, 1)
SKEWS_MS = {"thermo-1": -95_000, "thermo-2": 0, "meter-3": 42_000, "meter-4": 181_000}  # device clock - true time
MAX_DELAY_MS = 400  # network delay, send to receive
# device -> (offline from, for how long), in ms after the start: back online, it sends the
# readings it took meanwhile (stragglers: within the lateness, or too late)
OUTAGES = {"thermo-1": (210_000, 90_000), "meter-3": (330_000, 150_000), "meter-4": (MINUTE, 8 * MINUTE)}


def page_views(seed: int, minutes: int = 6, per_minute: int = 250, users: int = 200) -> list[dict]:
    """Page views in arrival order: event_id, user_id, page, latency_ms (a float), ts_ms."""
    rng = random.Random(seed)
    views, clock = [], BASE_MS
    for n in range(minutes * per_minute):
        clock += rng.randint(0, 2 * MINUTE // per_minute)
        t = clock
        kind = rng.random()
        if kind < 0.1:
            t -= rng.randint(5_000, 90_000)  # late, within the lateness
        elif kind < 0.12 and n > minutes * per_minute // 2:
            t -= rng.randint(20 * MINUTE, 30 * MINUTE)  # far too late
        views.append({"event_id": f"v{n}", "user_id": f"u{rng.randrange(users):03d}",
                      "page": rng.choices(PAGES, PAGE_WEIGHTS)[0],
                      "latency_ms": round(rng.lognormvariate(4, 0.6), 1), "ts_ms": t})
    return views


def device_readings(seed: int, minutes: int = 12) -> list[dict]:
    """Readings in the order the broker receives them: event_id, device_id, event_ms and
    sent_ms (device clock), received_ms (broker clock, the record timestamp), and the
    truth for checking: true_ms. A device offline (`OUTAGES`) sends its backlog when back."""
    rng = random.Random(seed)
    readings, n = [], 0
    for device, skew in SKEWS_MS.items():
        t = BASE_MS + rng.randint(0, 10_000)
        offline_from, offline_for = OUTAGES.get(device, (0, 0))
        back = BASE_MS + offline_from + offline_for
        while t < BASE_MS + minutes * MINUTE:
            sent = (back if BASE_MS + offline_from <= t < back else t) + rng.randint(0, 300)
            n += 1
            readings.append({"event_id": f"r{n}", "device_id": device, "event_ms": t + skew, "sent_ms": sent + skew,
                             "received_ms": sent + rng.randint(20, MAX_DELAY_MS), "true_ms": t})
            t += rng.randint(5_000, 15_000)
    return sorted(readings, key=lambda r: (r["received_ms"], r["event_id"]))
