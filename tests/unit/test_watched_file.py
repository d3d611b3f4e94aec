"""WatchedJson: a file the CLI replaces while the broker reads it."""
import json

import pytest

from headwater.broker.security.watched_file import CHECK_INTERVAL_S, WatchedJson
from headwater.log.layout import CorruptFile, replace_atomically


def test_a_corrupt_file_refuses_the_start_and_later_keeps_the_last_good_content(tmp_path, caplog):
    path, clock = tmp_path / "acls.json", [0.0]
    path.write_text("[1, 2")
    with pytest.raises(CorruptFile, match="acls.json is not valid JSON"):
        WatchedJson(path, list, [], now=lambda: clock[0])

    replace_atomically(path, json.dumps([1, 2]))
    watched = WatchedJson(path, list, [], now=lambda: clock[0])
    assert watched.load() == [1, 2]
    replace_atomically(path, "[1, 2, 3")   # a bad hand edit while the broker serves
    clock[0] += CHECK_INTERVAL_S
    assert watched.load() == [1, 2]
    assert "still using its last good content" in caplog.text
    replace_atomically(path, json.dumps([3]))
    clock[0] += CHECK_INTERVAL_S
    assert watched.load() == [3]
