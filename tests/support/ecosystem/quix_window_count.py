"""A quixstreams application, run unchanged by tests/system/test_ecosystem.py in its own
virtualenv (quixstreams pins an older confluent-kafka than Headwater's): a tumbling
10-second count per key with 2 seconds of grace, the final count of each window to a topic.

Arguments: bootstrap, state directory, windows to emit before stopping (0: run until 5 s
without a message), processing guarantee, topic and group prefix."""
import sys

from quixstreams import Application

bootstrap, state_dir, windows = sys.argv[1], sys.argv[2], int(sys.argv[3])
guarantee, prefix = (sys.argv[4], sys.argv[5]) if len(sys.argv) > 5 else ("at-least-once", "quix")
app = Application(broker_address=bootstrap, consumer_group=f"{prefix}-counts", auto_offset_reset="earliest",
                  state_dir=state_dir, processing_guarantee=guarantee, commit_interval=0.5,
                  # a SIGKILLed predecessor leaves the group, and its open transaction is aborted, soon
                  consumer_extra_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000},
                  producer_extra_config={"transaction.timeout.ms": 5000})
source = app.topic(f"{prefix}-events", key_deserializer="str", value_deserializer="json")
sink = app.topic(f"{prefix}-window-counts", key_serializer="str", value_serializer="json")
counts = app.dataframe(source).tumbling_window(duration_ms=10_000, grace_ms=2_000).count().final()
counts.to_topic(sink)
if windows:
    app.run(count=windows, timeout=60)  # stops after that many closed windows, or 60 s without one
else:
    app.run(timeout=5)
