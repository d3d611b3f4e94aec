"""One contract suite, every store: tests taking `open_store` run on SQLite and on the real
PostgreSQL the suite starts."""
import pytest

from headwater.eventsourcing import open_store as open_any_store


@pytest.fixture(params=["sqlite", "postgres"])
def store_location(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "events.db")
    return request.getfixturevalue("pg_db")


@pytest.fixture
def open_store(store_location):
    """Open a store on the test's database (one per thread, as connections are); all closed after."""
    opened = []

    def open_(**options):
        store = open_any_store(store_location, **options)
        opened.append(store)
        return store
    yield open_
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store):
    return open_store()
