"""An outdoor shop's catalogue and its customers' standing searches ("tell me when a tent
under 100 comes in"): the data of the percolator's demo, tests and bench."""
from __future__ import annotations

import random

ADJECTIVES = ["ultralight", "red", "blue", "waterproof", "compact", "family", "alpine", "budget", "classic", "steel",
              "green", "insulated", "folding", "windproof", "trail", "summit"]
THINGS = {"tents": ["tent", "tarp", "bivy", "hammock", "shelter", "footprint"],
          "cooking": ["stove", "pot", "kettle", "mug", "spork", "pan"],
          "climbing": ["rope", "harness", "helmet", "carabiner", "belay", "chalk"],
          "lighting": ["lamp", "headlamp", "lantern", "torch", "beacon", "candle"],
          "sleeping": ["bag", "mat", "pillow", "liner", "quilt", "cot"],
          "packs": ["backpack", "daypack", "duffel", "drybag", "hipbelt", "rucksack"]}
BRANDS = [f"brand{i:03d}" for i in range(200)]


def document(rng: random.Random, number: int) -> dict:
    category = rng.choice(sorted(THINGS))
    title = f"{rng.choice(BRANDS)} {rng.choice(ADJECTIVES)} {rng.choice(THINGS[category])}"
    return {"sku": f"sku-{number:05d}", "title": title, "category": category, "price": rng.randrange(5, 400),
            "in_stock": rng.random() < 0.8}


def standing_query(rng: random.Random) -> dict:
    """Mostly what a customer asks (a word and a price, a brand in a category, a phrase),
    and a few that no index key selects (a price range with a "not")."""
    category = rng.choice(sorted(THINGS))
    thing = {"term": ["title", rng.choice(THINGS[category])]}
    under = {"field": "price", "op": "<", "value": rng.randrange(20, 400)}
    shape = rng.randrange(50)
    if shape < 20:
        return {"all": [thing, under]}
    if shape < 30:
        return {"all": [{"term": ["title", rng.choice(BRANDS)]}, {"field": "category", "op": "=", "value": category}]}
    if shape < 40:
        return {"phrase": ["title", f"{rng.choice(ADJECTIVES)} {rng.choice(THINGS[category])}"]}
    if shape < 45:
        return {"all": [{"field": "category", "op": "=", "value": category}, under,
                        {"field": "in_stock", "op": "=", "value": True}]}
    if shape < 49:
        return {"any": [thing, {"term": ["title", rng.choice(BRANDS)]}]}
    return {"all": [{"field": "price", "op": "<", "value": rng.randrange(5, 12)},
                    {"not": {"field": "category", "op": "=", "value": category}}]}
