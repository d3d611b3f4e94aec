"""A webhook endpoint that keeps count of what it acknowledged: for tests, the demo and the bench.

It answers like a real, unreliable service when asked to: a share of requests fail with 500,
some hang until the sender gives up, chosen records always fail, and the whole endpoint can
go down (503). A batch (a JSON array) is answered as a whole: it fails when any of its records
would. Deliveries are deduplicated by (topic, partition, offset), as an endpoint of
an at-least-once subscription must.
"""
from __future__ import annotations

import asyncio
import base64
import random
import threading
from collections import Counter
from collections.abc import Callable

import orjson
from aiohttp import web

from headwater.push import envelope


class WebhookReceiver:
    def __init__(self, secret: bytes | None = None, fail_rate: float = 0.0, hang_rate: float = 0.0,
                 always_fail: Callable[[dict], bool] = lambda delivery: False, seed: int = 0):
        self.secret = secret
        self.fail_rate = fail_rate
        self.hang_rate = hang_rate
        self.always_fail = always_fail
        self.down = False  # answer every request 503, like an endpoint being redeployed
        self._rng = random.Random(seed)
        self.acknowledged: dict[tuple[str, int, int], dict] = {}  # first acknowledged body of each record
        self.answers: Counter[int] = Counter()                    # HTTP status -> count (0: hung)
        self.attempts: Counter[tuple[str, int, int]] = Counter()  # requests per record
        self.arrivals: list[dict] = []                            # every record delivered, in arrival order
        self.requests: list[list[dict]] = []                      # the records of each request, in arrival order
        self.bad_signatures = 0
        self.in_flight = self.max_in_flight = 0
        self._key_in_flight: Counter[tuple[int, str | None]] = Counter()  # by partition and key
        self.max_key_in_flight = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="webhook-receiver", daemon=True)
        self._runner: web.AppRunner | None = None
        self.url = ""

    def start(self) -> "WebhookReceiver":
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(30)
        return self

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_post("/", self._handle)
        # handler_cancellation: a request the sender gave up on stops counting as in flight
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/"

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> "WebhookReceiver":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def acknowledged_values(self) -> dict[tuple[str, int, int], bytes | None]:
        return {where: _unb64(body["value"]) for where, body in list(self.acknowledged.items())}

    async def _handle(self, request: web.Request) -> web.Response:
        payload = await request.read()
        if self.secret is not None and not envelope.verify(self.secret, payload, request.headers.get(
                envelope.SIGNATURE_HEADER)):
            self.bad_signatures += 1
            return web.Response(status=401, text="bad signature")
        body = orjson.loads(payload)
        deliveries = body if isinstance(body, list) else [body]  # a batch, or one record
        self.requests.append(deliveries)
        keys = {(d["partition"], d["key"]) for d in deliveries}
        for delivery in deliveries:
            self.arrivals.append(delivery)
            self.attempts[delivery["topic"], delivery["partition"], delivery["offset"]] += 1
        self.in_flight += 1
        self._key_in_flight.update(keys)
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.max_key_in_flight = max(self.max_key_in_flight, *(self._key_in_flight[k] for k in keys))
        try:
            status = self._answer(deliveries)
            if status == 0:
                self.answers[0] += 1
                await asyncio.sleep(3600)  # until the sender gives up and handler_cancellation ends this
            await asyncio.sleep(0.002)     # a little work, so concurrent deliveries overlap here
            self.answers[status] += 1
            if status == 200:
                for delivery in deliveries:
                    self.acknowledged.setdefault((delivery["topic"], delivery["partition"], delivery["offset"]),
                                                 delivery)
            return web.Response(status=status)
        finally:
            self.in_flight -= 1
            self._key_in_flight.subtract(keys)

    def _answer(self, deliveries: list[dict]) -> int:
        """One answer per request: a batch fails as a whole, when any record of it fails."""
        if self.down:
            return 503
        if any(self.always_fail(delivery) for delivery in deliveries):
            return 500
        roll = self._rng.random()
        if roll < self.hang_rate:
            return 0
        return 500 if roll < self.hang_rate + self.fail_rate else 200


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)

