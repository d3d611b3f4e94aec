"""A SparkSession with sane local defaults and the `headwater` format registered."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

# What the pipelines need, locally or on a cluster. Shuffle partitions also fix the
# number of state partitions of a streaming checkpoint at its first run, so keep them
# small and stable.
PIPELINE_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    # A micro-batch commits its state changes as a small changelog file per state partition
    # instead of uploading a zipped RocksDB snapshot (snapshots are made in the background).
    # At a few hundred events a second the upload was most of each batch's time.
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
}
# A query stopped while its foreachBatch function runs a job gets the Python traceback back
# as the error, and Spark tells a stop from a failure by a regex that recurses once per
# character of it (StreamExecution.PROXY_ERROR, `(.|\r\n|\r|\n)*`): ~600 bytes of stack a
# character, so the default 1 MB stack overflowed on a 9 KB traceback and the stream thread
# died of a StackOverflowError. 16 MB holds ~24 KB; pages are committed only as a thread uses
# them. The stream thread is the driver's, which runs in this process locally and on a cluster.
DRIVER_STACK = "-Xss16m"
# Local defaults on top.
LOCAL_CONF = {
    **PIPELINE_CONF,
    # One state task a micro-batch instead of two: on a local machine the stateful stage of a
    # small batch is fixed per-task cost (a RocksDB commit, a changelog file), not work to
    # spread over cores (issue #27: JVM CPU a batch lower in 5 of 6 alternating runs). A
    # checkpoint keeps the number it was begun with, so existing ones go on with theirs.
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # A Python worker that starts slowly on a busy machine must not fail the query
    # (the default waits 15 s for it to connect back).
    "spark.python.authenticate.socketTimeout": "120s",
    # Without Hadoop's native library the JVM forks a process for file operations: `chmod`
    # for every file created and, with the default (FileContext) checkpoint file manager,
    # `readlink`s for every rename into place, tens of ms in each micro-batch's offset and
    # commit log writes. The FileSystem manager renames without them (still a temporary
    # file renamed into place: atomic on a local disk).
    "spark.sql.streaming.checkpointFileManagerClass":
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    # Python workers start with the source's reader already loaded (worker_daemon).
    "spark.python.daemon.module": "headwater.spark.worker_daemon",
    # Every micro-batch broadcasts its tasks and Hadoop conf in buffers of
    # spark.broadcast.blockSize (4 MB) and serializes in 1 MB chunks. G1 allocates an object
    # of half a region or more as humongous, and the 1 MB regions of a 1 GB driver heap made
    # each buffer one: every few batches one started a collection and a concurrent marking
    # cycle (JFR: 47 of 88 collections in 44 s of a window count). 16 MB regions hold them.
    # The JIT's optimising compiler (C2) warms a driver of small micro-batches for minutes:
    # its threads took 40% of the JVM's CPU in a 40-s window count (issue #27). With C1's
    # quick compilations only, the JVM's CPU a batch was 31-53% lower in 8 alternating pairs,
    # and the throughput bench's JVM CPU a row lower too.
    "spark.driver.extraJavaOptions": f"-XX:G1HeapRegionSize=16m -XX:TieredStopAtLevel=1 {DRIVER_STACK}",
}


def cluster_conf() -> dict[str, str]:
    """Settings for a cluster's executors: the pipelines' own, the driver's stack (the driver
    runs here, in client mode), the interpreter for their Python workers, and the directory
    Headwater was imported from on their PYTHONPATH, which serves a source checkout as well as
    an installed package (executors on other machines need Headwater installed at the same
    path, or shipped with --py-files)."""
    import headwater

    package_root = str(Path(headwater.__file__).resolve().parent.parent)
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
    return {**PIPELINE_CONF, "spark.driver.extraJavaOptions": DRIVER_STACK, "spark.executorEnv.PYTHONPATH": path,
            "spark.pyspark.python": os.environ["PYSPARK_PYTHON"]}


def register(spark: SparkSession) -> SparkSession:
    """Register the `headwater` data source on a session the caller built."""
    from headwater.spark.source import HeadwaterDataSource

    spark.dataSource.register(HeadwaterDataSource)
    return spark


def session(master: str | None = None, app_name: str = "headwater", conf: dict | None = None) -> SparkSession:
    """Build (or reuse) a SparkSession.

    Without `master` (or with a `local[...]` one) it runs Spark in local mode on this
    machine with the defaults above; with a cluster's master URL it adds what the
    pipelines need and what executors need to import Headwater, leaving the cluster's
    other settings alone. `conf` comes last. Either way the `headwater` format is
    registered.
    """
    # Workers must run the interpreter that has Headwater installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    local = master is None or master.startswith("local")
    if local:  # on a cluster the driver must be reachable from executors on other hosts
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name).master(master or "local[2]")
    for key, value in {**(LOCAL_CONF if local else cluster_conf()), **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if local:
        spark.sparkContext.setLogLevel("ERROR")
    return register(spark)
