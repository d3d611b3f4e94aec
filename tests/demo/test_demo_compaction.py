"""The demo's compaction chapter: replay after cleaning rebuilds the same customers from fewer bytes."""
from rich.console import Console

from headwater.demo import compaction
from headwater.testing import BrokerProcess


def test_compaction_chapter(tmp_path):
    with BrokerProcess(tmp_path / "data", "--cleaner-interval-ms", "200") as broker:
        console = Console(record=True, width=200)
        compaction.run(broker.bootstrap, console)
    text = console.export_text()
    assert "as the full history: True; each kept record at its original offset: True; " \
           "deleted customers gone: True" in text
    rows = {line.split("│")[1].strip(): [int(c.strip().replace(",", "")) for c in line.split("│")[2:5]]
            for line in text.splitlines() if line.startswith("│")}
    written, cleaned = rows["as written"], rows["after cleaning"]
    assert written[0] == compaction.UPDATES + 5 + 1  # updates, 5 deletions, one sign-up
    assert cleaned[0] == cleaned[1] < written[0]  # one record per key
    assert cleaned[2] < written[2] / 5  # bytes on disk
