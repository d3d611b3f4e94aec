"""Client quotas, as Kafka names them: byte rates for producers and consumers, and a share of
the broker's time (request_percentage), per client id with a default for every other client.

Each (client id, quota) has a bucket that fills at the quota's rate up to one second's worth.
A request takes what it used (bytes in, bytes out, seconds of handling); a bucket in debt
gives the throttle time: how long until the debt is paid at the quota's rate. The broker
sends it as `throttle_time_ms` and mutes the connection that long, as Kafka does, so a
client above its quota is held to it whether or not it honours the field.
"""
from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path

from headwater.log.layout import read_json, replace_atomically
from headwater.protocol.messages import ApiKey
from headwater.protocol.quota_names import CONSUMER_BYTE_RATE, KEYS, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE

BURST_SECONDS = 1.0       # a bucket holds this much of its rate: short bursts pass unthrottled

Entity = str | None  # a client id, or None: the default for client ids without their own quota


class QuotaError(ValueError):
    pass


class ClientQuotas:
    def __init__(self, path: Path | None = None, now: Callable[[], float] = time.monotonic):
        self._path = path
        self._now = now
        self.configs: dict[Entity, dict[str, float]] = {}
        self._buckets: dict[tuple[str | None, str], list[float]] = {}  # -> [available, last refill]
        for entry in read_json(path, []) if path is not None else ():
            self.configs[entry["client_id"]] = entry["quotas"]

    def quota(self, client_id: str | None, key: str) -> float | None:
        for entity in (client_id, None):
            if entity in self.configs and key in self.configs[entity]:
                return self.configs[entity][key]
        return None

    def charge(self, client_id: str | None, key: str, amount: float) -> float:
        """Take `amount` from the client's bucket for `key`; the seconds to throttle it (0: none)."""
        rate = self.quota(client_id, key)
        if rate is None:
            return 0.0
        if key == REQUEST_PERCENTAGE:
            rate /= 100  # percent of one second per second
        now = self._now()
        bucket = self._buckets.setdefault((client_id, key), [rate * BURST_SECONDS, now])
        bucket[0] = min(rate * BURST_SECONDS, bucket[0] + (now - bucket[1]) * rate) - amount
        bucket[1] = now
        return max(0.0, -bucket[0] / rate)

    def throttle(self, client_id: str | None, api_key: int, request_bytes: int, response_bytes: int,
                 seconds: float) -> float:
        """Charge one answered request to its client's quotas; the seconds to throttle it."""
        if not self.configs:
            return 0.0   # asked of every request: nothing to charge while no quota is set
        used = [(REQUEST_PERCENTAGE, seconds)] if api_key != ApiKey.FETCH else []  # a fetch's long poll is idle
        if api_key == ApiKey.PRODUCE:
            used.append((PRODUCER_BYTE_RATE, request_bytes))
        elif api_key == ApiKey.FETCH:
            used.append((CONSUMER_BYTE_RATE, response_bytes))
        return max((self.charge(client_id, key, amount) for key, amount in used), default=0.0)

    @staticmethod
    def validate(key: str, value: float | None) -> None:
        """Raise QuotaError unless ``value`` (None: removed) may be set as quota ``key``."""
        if key not in KEYS:
            raise QuotaError(f"unknown quota {key!r}; known: {', '.join(KEYS)}")
        if value is not None and not 0 < value < math.inf:  # NaN fails too: it would never throttle
            raise QuotaError(f"quota {key} must be a positive number, got {value}")

    def alter(self, entity: Entity, changes: dict[str, float | None]) -> None:
        """Set (or with None remove) quotas of ``entity``: all are checked before any is set, and
        they are saved once."""
        for key, value in changes.items():
            self.validate(key, value)
        for key, value in changes.items():
            if value is None:
                self.configs.get(entity, {}).pop(key, None)
                if not self.configs.get(entity, True):
                    del self.configs[entity]
            else:
                self.configs.setdefault(entity, {})[key] = value
        self._buckets = {k: b for k, b in self._buckets.items() if k[1] not in changes}  # new rates start afresh
        self._save()

    def _save(self) -> None:
        if self._path is None:
            return
        replace_atomically(self._path, json.dumps([{"client_id": e, "quotas": q} for e, q in self.configs.items()]))
