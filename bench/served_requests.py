"""The requests a Headwater broker has served so far, per API, read from its /metrics (a broker
started with --http-listener): what a bench's CPU figure is read against."""
from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

REQUESTS_SERVED = "kafka_network_requestmetrics_request_seconds_count"


def served_requests(console_url: str) -> dict[str, float]:
    """API name (Produce, Fetch, ...) → requests answered since the broker started."""
    with urllib.request.urlopen(console_url + "metrics", timeout=30) as response:
        text = response.read().decode()
    return {sample.labels["request"]: sample.value for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name == REQUESTS_SERVED}
