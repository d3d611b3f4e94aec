"""The overview's message-rate plot, computed in-process from samples taken on a manual clock:
internal topics left out, and a burst spread over the rate window instead of one sample's spike."""
from headwater.broker.broker import Broker
from headwater.broker.config import BrokerConfig
from headwater.http.history import History
from headwater.records import Record, encode_batch


def append(broker: Broker, topic: str, count: int) -> None:
    broker.log_manager.topics.get(topic) or broker.log_manager.create_topic(topic, 1, {})
    result = broker.appender.append(topic, 0, encode_batch([Record(i, 0, b"k", b"x", []) for i in range(count)]))
    assert result.error == 0


def test_a_burst_is_spread_over_the_window_and_internal_topics_are_left_out(tmp_path):
    broker = Broker(BrokerConfig(data_dir=tmp_path / "data", flush="never"))
    now = [1000.0]
    history = History(broker, clock=lambda: now[0])
    append(broker, "orders", 1)
    append(broker, "__consumer_offsets", 1)
    history.sample()
    bursts = {2: 400, 22: 40}   # records appended just before the sample at that second
    for second in range(2, 42, 2):
        if second in bursts:
            append(broker, "orders", bursts[second])
        append(broker, "__consumer_offsets", 50)
        now[0] = 1000.0 + second
        history.sample()
    times, series = history.message_rates(window_s=20)
    assert list(series) == ["orders"]
    assert times == [1000.0 + s for s in range(2, 42, 2)]
    # Ground truth: records appended in the 20 s up to each sample, over 20 s.
    expected = [sum(n for at, n in bursts.items() if s - 20 < at <= s) / 20 for s in range(2, 42, 2)]
    assert series["orders"] == expected
    assert max(series["orders"]) == 400 / 20   # not 400 / 2, the one sample's spike
    broker.close()
