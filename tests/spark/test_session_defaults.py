"""The local session's speed settings take effect in Spark itself, not only in its conf."""

import threading
import time
from pathlib import Path

from pyspark.sql import functions as F

from headwater.spark.session import DRIVER_STACK, LOCAL_CONF, cluster_conf


def test_task_workers_fork_from_the_daemon_that_preloads_the_reader(spark):
    def daemon_name(batches):  # defined here to be pickled by value: workers cannot import tests
        import sys

        import pyarrow as pa

        spec = sys.modules["__main__"].__spec__
        yield pa.RecordBatch.from_pydict({"daemon": [spec.name if spec else None]})

    rows = spark.range(1, numPartitions=1).mapInArrow(daemon_name, "daemon string").collect()
    assert [row.daemon for row in rows] == ["headwater.spark.worker_daemon"]


def test_task_workers_start_with_the_preloaded_heap_frozen(spark):
    """Spark's daemon runs gc.collect() in a worker after each of its tasks: what the
    preload imported must be out of the collector's reach, not walked every time."""
    def heap(batches):  # pickled by value, as above
        import gc

        import pyarrow as pa

        yield pa.RecordBatch.from_pydict({"frozen": [gc.get_freeze_count()], "tracked": [len(gc.get_objects())]})

    [row] = spark.range(1, numPartitions=1).mapInArrow(heap, "frozen long, tracked long").collect()
    # The reader's imports alone leave well over 100,000 objects (numba, pyarrow, the codec).
    assert row.frozen > 100_000 and row.frozen > 2 * row.tracked, row


def test_state_is_committed_as_changelogs(spark, tmp_path: Path):
    counts = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 10).load()
              .groupBy((F.col("value") % 3).alias("k")).count())
    query = (counts.writeStream.format("noop").outputMode("update")
             .option("checkpointLocation", str(tmp_path)).start())
    try:
        while query.lastProgress is None or query.lastProgress["batchId"] < 1:
            time.sleep(0.1)
    finally:
        query.stop()
    # Batch n's state changes are file n+1 of each state partition: a changelog, not a zipped snapshot.
    partitions = [tmp_path / "state" / "0" / str(p) for p in range(int(spark.conf.get("spark.sql.shuffle.partitions")))]
    for partition in partitions:
        names = {f.name for f in partition.iterdir() if not f.name.startswith(".")}
        assert {"1.changelog", "2.changelog"} <= names, names
        assert not any(name.endswith(".zip") for name in names), names


def test_broadcast_blocks_are_not_humongous_in_the_driver_heap(spark):
    """Each micro-batch broadcasts in blocks of spark.broadcast.blockSize: G1 allocates an
    object of half a region or more as humongous, and each such allocation can start a
    collection and a concurrent marking cycle."""
    block = spark._jvm.org.apache.spark.network.util.JavaUtils.byteStringAsBytes(
        spark.sparkContext.getConf().get("spark.broadcast.blockSize", "4m"))
    assert vm_option(spark, "UseG1GC") == "true"
    region = int(vm_option(spark, "G1HeapRegionSize"))
    assert block < region // 2, (block, region)


def test_the_driver_jit_stops_at_the_quick_compiler(spark):
    """C2's compilations cost a local driver of small micro-batches more CPU than the faster
    code they make saves: the JVM is to run with C1 only."""
    assert vm_option(spark, "TieredStopAtLevel") == "1"


def test_a_query_stopped_inside_its_foreach_batch_job_stops_cleanly(spark, tmp_path: Path):
    """Stopping a query interrupts the job its foreachBatch function is running, and the function
    fails with a traceback of several KB. Spark tells that stop from a failure by a regex that
    recurses once per character of it: on the JVM's default 1 MB stack the stream thread died of a
    StackOverflowError instead, the query never reaching "Stopped"."""
    started = threading.Event()

    @F.udf("long")
    def slow(value):  # pickled by value: workers cannot import tests
        import time

        time.sleep(30)
        return value

    def sink(batch, batch_id):
        started.set()
        batch.sparkSession.range(1).select(slow("id")).collect()

    query = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 1).load()
             .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path)).start())
    try:
        assert started.wait(120)
        time.sleep(1)  # the sink's job has started
    finally:
        query.stop()
    assert query.exception() is None
    assert query.status["message"] == "Stopped", query.status


def test_a_cluster_session_gives_its_driver_the_same_stack():
    """The stream thread that stops a query is the driver's, which runs in the user's process
    on a cluster too (client mode): its stack is set there as well as locally."""
    assert DRIVER_STACK in cluster_conf()["spark.driver.extraJavaOptions"].split()
    assert DRIVER_STACK in LOCAL_CONF["spark.driver.extraJavaOptions"].split()


def vm_option(spark, name: str) -> str:
    """The driver JVM's value of a HotSpot flag."""
    jvm = spark._jvm
    diagnostics = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
    return diagnostics.getVMOption(name).getValue()
