"""The demo's stream-processing chapter: every pipeline's answer from Spark equals the
plain-Python one, and a difference fails `make demo` with a clear message."""
import pytest
from rich.console import Console

from headwater.demo import flagship, spark_chapter, stream_processing
from headwater.demo.shop_events import BASE_MS, MINUTE, morning


def rows(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.split("│")[1:-1]] for line in text.splitlines() if line.startswith("│")]


def test_chapter_checks_every_pipeline_against_plain_python(spark, broker):
    console = Console(record=True, width=200)
    stream_processing.run(broker.bootstrap, console, spark)
    text = console.export_text()
    for pipeline in ("windows", "session windows", "stream-stream join", "stream-table join", "table-table join",
                     "complex event processing"):
        assert f"✓ {pipeline}: Spark's answers equal plain Python's" in text
    # The scenario shows what it sets out to: too-late orders dropped, the scripted
    # fraud caught and nothing else, the view after an update and two deletes.
    assert "4 arrived too late" in text
    table = rows(text)
    assert [r[0] for r in table if r[0].startswith("card-")] == ["card-4242", "card-5100"]
    assert ["p6", "rope", "15", "360.00", "gone"] in table
    assert any(r[:2] == ["p2", "tent"] and r[4].endswith("4,320.00") for r in table)  # 24 tents at 180.00
    assert ["09:22:40", "cho", "s16-q1-c2", "-", "-"] in table  # a click after the account was deleted


def test_a_difference_from_plain_python_is_a_clear_error(tmp_path):
    chapter = spark_chapter.Chapter("127.0.0.1:9", Console(record=True), None, tmp_path, morning())
    with pytest.raises(spark_chapter.CheckFailed,
                       match=r"^windows: tumbling from Spark differ from plain Python: "
                             rf"{BASE_MS}: Spark 12 / Python 13; {BASE_MS + 10 * MINUTE}: Spark - / Python 17$"):
        chapter.check("windows", tumbling=({BASE_MS: 12}, {BASE_MS: 13, BASE_MS + 10 * MINUTE: 17}))


def test_a_failed_check_makes_the_demo_exit_non_zero(monkeypatch, capsys):
    class Failing:
        @staticmethod
        def run(bootstrap, console):
            raise spark_chapter.CheckFailed("windows: tumbling from Spark differ from plain Python: ...")

    monkeypatch.setattr(flagship, "CHAPTERS", [Failing])
    assert flagship.main([]) == 1  # no command-line flags: the demo as `make demo` runs it
    assert "the demo's check failed: windows: tumbling from Spark differ" in capsys.readouterr().out
