"""The demo's chapter on keeping systems in sync: the CDC-fed index and cache equal the
database and plain Python's searches, checked as the chapter runs, next to the CDC chapter."""
from rich.console import Console

from headwater.demo import cdc_shop, derived_systems, flagship


def test_chapter_checks_the_derived_systems(spark, broker):
    console = Console(record=True, width=200)
    derived_systems.run(broker.bootstrap, console, spark)
    text = console.export_text()
    assert "✓ derived systems: Spark's answers equal plain Python's" in text
    assert "CDC-fed index and cache, applying the database's own log in order: 0 disagree" in text
    assert flagship.CHAPTERS.index(derived_systems) == flagship.CHAPTERS.index(cdc_shop) + 1
