"""Waiting for background work (a rebalance, a cleaner pass, a connector) to become visible."""
import time


def wait_until(condition, timeout=60, interval=0.3, what="condition"):
    """Poll until `condition()` returns a truthy value, and return it; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(interval)
