"""The demo's search chapter: the percolator's matches and the CDC-fed index and cache
equal plain Python's answers, checked as the chapter runs."""
from rich.console import Console

from headwater.demo import flagship, search


def test_chapter_checks_the_percolator_and_the_derived_systems(spark, broker):
    console = Console(record=True, width=200)
    search.run(broker.bootstrap, console, spark)
    text = console.export_text()
    assert "✓ percolator: Spark's answers equal plain Python's" in text
    assert "✓ derived systems: Spark's answers equal plain Python's" in text
    assert "CDC-fed index and cache, applying the database's own log in order: 0 disagree" in text
    assert "rejected and counted: 2 (not JSON; not a document)" in text
    assert search in flagship.CHAPTERS
