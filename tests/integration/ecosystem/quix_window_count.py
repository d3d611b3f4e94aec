"""A quixstreams application, run unchanged by tests/integration/test_ecosystem.py in its own
virtualenv (quixstreams pins an older confluent-kafka than Headwater's): a tumbling
10-second count per key with 2 seconds of grace, the final count of each window to a topic."""
import sys

from quixstreams import Application

bootstrap, state_dir, windows = sys.argv[1], sys.argv[2], int(sys.argv[3])
app = Application(broker_address=bootstrap, consumer_group="quix-counts", auto_offset_reset="earliest",
                  state_dir=state_dir, processing_guarantee="at-least-once")
source = app.topic("quix-events", key_deserializer="str", value_deserializer="json")
sink = app.topic("quix-window-counts", key_serializer="str", value_serializer="json")
counts = app.dataframe(source).tumbling_window(duration_ms=10_000, grace_ms=2_000).count().final()
counts.to_topic(sink)
app.run(count=windows, timeout=60)  # stops after that many closed windows, or 60 s without one
