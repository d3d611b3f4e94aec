"""The demo's chapter of analytics, search on streams and the three clocks: each answer
checked as it runs, exact ones against plain Python, approximate ones against their
stated bounds."""
from rich.console import Console

from headwater.demo import analytics


def test_chapter_checks_every_answer(spark, broker):
    console = Console(record=True, width=200)
    analytics.run(broker.bootstrap, console, spark)
    text = console.export_text()
    for check in ("latency-stats: rates and rolling means equal plain Python's",
                  "top-pages: Spark's ranking equals plain Python's",
                  "percolator: Spark's answers equal plain Python's",
                  "device-clocks: results, corrections and too-late counts equal plain Python's"):
        assert f"✓ {check}" in text
    assert "revision 1" in text  # a straggler's correction is shown
    assert "rejected and counted: 2 (not JSON; not a document)" in text
