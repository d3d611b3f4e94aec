"""pytest fixtures of a real PostgreSQL (`headwater.testing.PostgresServer`) for the CDC and Spark sink tests."""
import os
import time

import pytest

from headwater.testing import PostgresServer


@pytest.fixture(scope="session")
def postgres():
    server = PostgresServer()
    yield server
    server.stop()


@pytest.fixture
def pg_db(postgres):
    """A fresh database per test, so slots/publications/tables never collide between tests."""
    name = f"t{os.getpid()}_{time.monotonic_ns()}"
    postgres.execute(f"CREATE DATABASE {name}")
    dsn = postgres.dsn.replace("dbname=postgres", f"dbname={name}")
    yield dsn
    # Slots pin the database; drop them first (a killed connector may have left one active).
    postgres.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                     "WHERE database = %s AND active_pid IS NOT NULL", (name,))
    time.sleep(0.2)
    postgres.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                     "WHERE database = %s", (name,))
    postgres.execute(f"DROP DATABASE {name} WITH (FORCE)")
