"""The broker's opt-in HTTP listener: Prometheus metrics (``metrics``) and the web console
(``console``), served on the broker's own event loop (``listener``). Both read the broker's
state in-process (``state``); neither needs a Kafka client."""
