"""The durable position only moves over batches the broker acknowledged completely, in order."""
from headwater.cdc.shipper import AckTracker


def test_durable_position_waits_for_every_earlier_batch():
    tracker = AckTracker()
    a, b = tracker.open(), tracker.open()
    a.pending, b.pending = 2, 1  # what Shipper.send counts
    tracker.close(a, 100)
    tracker.close(b, 200)
    tracker.mark(300)  # an empty transaction / heartbeat
    open_batch = tracker.open()  # a transaction still streaming: no position yet

    b.delivered(None, None)  # acknowledgements arrive out of order across partitions
    assert tracker.advance() is None and tracker.durable is None
    a.delivered(None, None)
    assert tracker.advance() is None
    a.delivered(None, None)
    assert tracker.advance() == 300 and tracker.delivered == 3
    assert tracker.advance() is None  # nothing new
    assert not tracker.idle()
    tracker.close(open_batch, 400)
    assert tracker.advance() == 400 and tracker.idle()


def test_a_delivery_error_never_counts_as_acknowledged():
    tracker = AckTracker()
    batch = tracker.open()
    batch.pending = 1
    tracker.close(batch, 10)
    batch.delivered("broker said no", None)
    assert tracker.advance() is None and tracker.error == "broker said no"
