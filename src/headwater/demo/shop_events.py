"""The events of the stream-processing chapter: a morning at a web shop, 09:00 to about
10:05 UTC on 2 March 2026, from a seeded generator (the same events in every run).

Streams arrive the way real ones do: mostly in order, some events a little late, a few
far too late (orders placed on a phone that was offline), one delivered twice (a
producer retry). Every event carries its id (`event_id`) and its time (`ts_ms`).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

BASE_MS = 1_772_442_000_000  # 2026-03-02 09:00 UTC
MINUTE = 60_000
USERS = ("ana", "ben", "cho", "dev", "eli", "fay", "gus")  # gus never signed up: no profile
PRODUCTS = {"p1": ("boots", 80.0), "p2": ("tent", 200.0), "p3": ("stove", 45.5), "p4": ("kayak", 640.0),
            "p5": ("lamp", 19.9), "p6": ("rope", 12.0)}
TERMS = {"boots": "p1", "tent": "p2", "stove": "p3", "kayak": "p4"}  # what a search is for
OFFLINE = ("o006", "o009", "o013", "o017")  # placed offline early on, delivered after 09:45


def at(minutes: float) -> int:
    """Epoch milliseconds `minutes` after 09:00."""
    return BASE_MS + round(minutes * MINUTE)


@dataclass
class Morning:
    orders: list = field(default_factory=list)  # in arrival order, as produced
    searches: list = field(default_factory=list)
    clicks: list = field(default_factory=list)
    profiles: list = field(default_factory=list)  # (user, row or None for a deletion, change time ms)
    payments: list = field(default_factory=list)
    products: dict = field(default_factory=lambda: {k: {"name": n, "price": p} for k, (n, p) in PRODUCTS.items()})
    # Later changes to the tables the revenue view joins: (topic, key, row or None).
    table_changes: list = field(default_factory=lambda: [
        ("products", "p2", {"name": "tent", "price": 180.0}),  # the spring sale
        ("products", "p6", None),  # rope leaves the catalogue
        ("orders", "o042", None),  # an order cancelled
    ])


def _orders(rng: random.Random) -> list:
    orders, clock = [], BASE_MS
    for n in range(1, 100):
        clock += rng.randint(15_000, 60_000)
        orders.append({"event_id": f"o{n:03d}", "user_id": rng.choice(USERS), "product_id": rng.choice(list(PRODUCTS)),
                       "quantity": rng.randint(1, 3), "ts_ms": clock})
    # One in six arrives up to 3 minutes late: within the lateness the windows allow.
    arrival = sorted(orders, key=lambda o: o["ts_ms"] + (rng.randint(30_000, 180_000) if rng.random() < 1 / 6 else 0))
    offline = [o for o in arrival if o["event_id"] in OFFLINE]
    arrival = [o for o in arrival if o["event_id"] not in OFFLINE]
    arrival[80:80] = offline
    arrival.insert(60, dict(arrival[55]))  # a producer retry: delivered twice
    return arrival


def _visits(rng: random.Random) -> tuple[list, list]:
    """Visits to the site (a session id each): searches, and clicks on the product
    searched for, most within 10 minutes of the search, some much later."""
    searches, clicks = [], []
    for v in range(1, 19):
        user, session = USERS[v % len(USERS)], f"s{v:02d}"
        clock = BASE_MS + rng.randint(0, 50 * MINUTE)
        for q in range(1, rng.randint(1, 3) + 1):
            clock += rng.randint(30_000, 4 * MINUTE)
            term, search_id = rng.choice(list(TERMS)), f"{session}-q{q}"
            searches.append({"event_id": search_id, "session_id": session, "user_id": user, "term": term,
                             "ts_ms": clock})
            for c in range(1, rng.choice([0, 0, 1, 1, 2]) + 1):
                delay = rng.choice([rng.randint(10_000, 8 * MINUTE), rng.randint(11 * MINUTE, 14 * MINUTE)])
                clicks.append({"event_id": f"{search_id}-c{c}", "session_id": session, "user_id": user,
                               "product_id": TERMS[term], "ts_ms": clock + delay})
    # Each stream out of order by up to a minute.
    return (sorted(searches, key=lambda e: e["ts_ms"] + rng.randint(0, MINUTE)),
            sorted(clicks, key=lambda e: e["ts_ms"] + rng.randint(0, MINUTE)))


def _profiles() -> list:
    """The users table's changelog: sign-ups before the morning, then an account
    deletion, an upgrade and a move while the clicks come in."""
    signups = [("ana", "free", "Lyon"), ("ben", "free", "Oslo"), ("cho", "pro", "Pune"), ("dev", "free", "Lima"),
               ("eli", "team", "Oslo"), ("fay", "free", "Lyon")]
    changes = [(user, {"name": user.title(), "tier": tier, "city": city}, at(-60 + i))
               for i, (user, tier, city) in enumerate(signups)]
    return changes + [("cho", None, at(20)),
                      ("ben", {"name": "Ben", "tier": "pro", "city": "Oslo"}, at(25)),
                      ("ana", {"name": "Ana", "tier": "free", "city": "Pune"}, at(30))]


def _payments(rng: random.Random) -> list:
    """Card payments: ordinary ones, and four cards with runs of failures."""
    script = [("card-4242", [12.1, 13.7, 15.2], 17.5),  # three failures, then a success: a match
              ("card-5100", [31.0, 32.2, 33.0, 34.5], 36.0),  # four failures, then a success: a match
              ("card-1881", [20.0, 21.0, 23.0], 34.0),  # the success comes too late
              ("card-7007", [40.0, 41.5], 42.0)]  # only two failures
    payments = []
    for card, failures, success in script:
        payments += [(card, at(m), "failed") for m in failures] + [(card, at(success), "succeeded")]
    payments += [(f"card-{1000 + rng.randrange(12)}", at(rng.uniform(0, 65)), "succeeded") for _ in range(24)]
    payments += [(f"card-{1000 + rng.randrange(12)}", at(rng.uniform(0, 60)), "failed") for _ in range(4)]
    events = [{"event_id": f"pay{n:03d}", "card_id": card, "status": status, "ts_ms": t}
              for n, (card, t, status) in enumerate(sorted(payments, key=lambda p: p[1]), 1)]
    arrival = sorted(events, key=lambda e: e["ts_ms"] + rng.randint(0, 30_000))
    # card-4242's second failure reaches us after its success: event time decides, not arrival.
    second = next(e for e in arrival if e["card_id"] == "card-4242" and e["ts_ms"] == at(13.7))
    arrival.remove(second)
    arrival.insert(next(i for i, e in enumerate(arrival) if e["ts_ms"] == at(17.5)) + 1, second)
    return arrival


def morning(seed: int = 2026) -> Morning:
    rng = random.Random(seed)
    searches, clicks = _visits(rng)
    return Morning(orders=_orders(rng), searches=searches, clicks=clicks, profiles=_profiles(),
                   payments=_payments(rng))
