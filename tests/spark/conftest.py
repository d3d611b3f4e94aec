"""One local SparkSession for the whole Spark suite (starting one costs ~10 s)."""

import pytest

import headwater.spark


@pytest.fixture(scope="session")
def spark():
    session = headwater.spark.session(app_name="headwater-tests")
    yield session
    session.stop()
