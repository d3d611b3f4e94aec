"""A SparkSession with sane local defaults and the `headwater` format registered."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

# Local defaults. Shuffle partitions also fix the number of state partitions of a
# streaming checkpoint at its first run, so keep them small and stable.
LOCAL_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # A Python worker that starts slowly on a busy machine must not fail the query
    # (the default waits 15 s for it to connect back).
    "spark.python.authenticate.socketTimeout": "120s",
}


def register(spark: SparkSession) -> SparkSession:
    """Register the `headwater` data source on a session the caller built."""
    from headwater.spark.source import HeadwaterDataSource

    spark.dataSource.register(HeadwaterDataSource)
    return spark


def session(master: str | None = None, app_name: str = "headwater", conf: dict | None = None) -> SparkSession:
    """Build (or reuse) a SparkSession.

    Without `master` it runs Spark in local mode on this machine with the defaults
    above; with a master URL it only adds the given `conf`, leaving the cluster's own
    settings alone. Either way the `headwater` format is registered.
    """
    # Workers must run the interpreter that has Headwater installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    if master is None:
        builder = builder.master("local[2]")
        for key, value in LOCAL_CONF.items():
            builder = builder.config(key, value)
    else:
        builder = builder.master(master)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if master is None:
        spark.sparkContext.setLogLevel("ERROR")
    return register(spark)
