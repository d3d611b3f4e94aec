"""Dynamic broker configs in-process: the levels' precedence, checks that change nothing, and
what is kept in the data directory."""
import pytest

from headwater.broker.dynamic_config import BROKER_LEVEL, DEFAULT_LEVEL, DynamicBrokerConfigs
from headwater.log import LogConfig

STATIC = LogConfig.from_topic_configs({"retention.ms": "1000", "segment.bytes": "4096"}, LogConfig())


def test_this_broker_over_the_cluster_default_over_the_static_defaults(tmp_path):
    configs = DynamicBrokerConfigs(tmp_path)
    assert configs.topic_defaults(STATIC) == STATIC
    configs.replace(DEFAULT_LEVEL, {"log.retention.ms": "2000", "log.retention.bytes": "10"})
    configs.replace(BROKER_LEVEL, {"log.retention.ms": "3000"})
    defaults = configs.topic_defaults(STATIC)
    assert (defaults.retention_ms, defaults.retention_bytes, defaults.segment_bytes) == (3000, 10, 4096)
    assert [configs.source_level(n) for n in ("log.retention.ms", "log.retention.bytes", "log.segment.bytes")] == \
        [BROKER_LEVEL, DEFAULT_LEVEL, None]
    assert DynamicBrokerConfigs(tmp_path).levels == configs.levels  # read back from the data directory


@pytest.mark.parametrize("name, value, fragment", [
    ("broker.id", "1", "Cannot update these configs dynamically"),
    ("log.retention.ms", "soon", "log.retention.ms"),
])
def test_a_refused_change_is_a_value_error_and_changes_nothing(tmp_path, name, value, fragment):
    configs = DynamicBrokerConfigs(tmp_path)
    configs.replace(BROKER_LEVEL, {"log.retention.ms": "3000"})
    with pytest.raises(ValueError, match=fragment):
        configs.topic_defaults(STATIC, (BROKER_LEVEL, {name: value}))
    assert configs.levels[BROKER_LEVEL] == {"log.retention.ms": "3000"}
    assert configs.topic_defaults(STATIC, (BROKER_LEVEL, {"log.retention.ms": "5"})).retention_ms == 5
    assert configs.topic_defaults(STATIC).retention_ms == 3000  # a check is no change
