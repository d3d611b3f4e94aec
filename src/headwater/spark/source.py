"""The `headwater` Python data source: Spark's Kafka source and sink. The driver plans and the sink
writes over confluent-kafka; executors read with the source's own fetcher (partition_reader)."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from headwater.spark.cluster import TP, Cluster, from_json, to_json
from headwater.spark.partition_reader import DataLossError, OffsetRange, read_range
from headwater.spark.options import OptionError, ReaderOptions, reader_options

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
          "timestamp timestamp, timestampType int")
HEADERS = "headers array<struct<key: string, value: binary>>"


class HeadwaterDataSource(DataSource):
    """`spark.read.format("headwater")`, `readStream`, `write` and `writeStream`.

    Options and columns are those of Spark's Kafka connector, so a pipeline moves to a
    Kafka cluster by changing the format name.
    """

    @classmethod
    def name(cls) -> str:
        return "headwater"

    def schema(self) -> str:
        include_headers = str(self.options.get("includeHeaders", "false")).lower() == "true"
        return SCHEMA + (", " + HEADERS if include_headers else "")

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(reader_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(reader_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool):
        from headwater.spark.sink import BatchWriter, writer_options

        return BatchWriter(writer_options(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool):
        from headwater.spark.sink import StreamWriter, writer_options

        return StreamWriter(writer_options(self.options, schema))


def _ranges(start: dict[TP, int], end: dict[TP, int]) -> list[OffsetRange]:
    # A partition absent from `start` appeared after the query started: read it from 0,
    # as the Kafka source does; if its log no longer starts at 0 that is data loss.
    return [OffsetRange(t, p, start.get((t, p), 0), e) for (t, p), e in sorted(end.items())
            if start.get((t, p), 0) < e]


def _read(options: ReaderOptions, partition: OffsetRange):
    return read_range(options.client, partition, options.include_headers, options.fail_on_data_loss)


class BatchReader(DataSourceReader):
    def __init__(self, options: ReaderOptions):
        self.options = options

    def partitions(self):
        cluster = Cluster(self.options.client)
        try:
            tps = cluster.partitions(self.options.subscription)
            start = cluster.resolve(self.options.starting, tps, "startingOffsets")
            end = cluster.resolve(self.options.ending, tps, "endingOffsets")
        finally:
            cluster.close()
        for tp in tps:
            if start[tp] > end[tp]:
                raise OptionError(f"partition {tp[0]}-{tp[1]}: starting offset {start[tp]} is after "
                                  f"ending offset {end[tp]}")
        return _ranges(start, end)

    def read(self, partition: OffsetRange):
        return _read(self.options, partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are the next offset to read per partition, like the Kafka source's.

    A batch is fixed by the (start, end) pair Spark writes to its offset log before
    running it, so a restarted query re-reads exactly the same records.
    """

    def __init__(self, options: ReaderOptions):
        self.options = options
        self._cluster: Cluster | None = None
        self._available_now_end: dict[TP, int] | None = None
        self._latest: dict[TP, int] = {}

    @property
    def cluster(self) -> Cluster:
        # Created lazily: this object is built on the driver's Python planner process.
        if self._cluster is None:
            self._cluster = Cluster(self.options.client)
        return self._cluster

    def initialOffset(self) -> dict:
        tps = self.cluster.partitions(self.options.subscription)
        return to_json(self.cluster.resolve(self.options.starting, tps, "startingOffsets"))

    def getDefaultReadLimit(self):
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self.cluster.partitions(self.options.subscription)
        self._available_now_end = self.cluster.latest(tps)

    def latestOffset(self, start: dict, limit) -> dict:
        begin = from_json(start)
        if self._available_now_end is not None:
            latest = self._available_now_end
        else:
            latest = self.cluster.latest(self.cluster.partitions(self.options.subscription))
        self._latest = latest
        for (topic, partition), offset in latest.items():
            if offset < begin.get((topic, partition), 0) and self.options.fail_on_data_loss:
                raise DataLossError(
                    f"partition {topic}-{partition}: the log end offset went back from "
                    f"{begin[(topic, partition)]} to {offset} (was the topic deleted and re-created?): records may "
                    f"have been lost. Set failOnDataLoss=false to go on from offset {offset}.")
        # A partition that disappeared keeps its last offset; a new one starts at 0; one
        # whose end went back goes on from its new end.
        end = {**begin, **latest}
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, end, limit.max_rows)
        return to_json(end)

    def reportLatestOffset(self):
        return to_json(self._latest) if self._latest else None

    def partitions(self, start: dict, end: dict):
        return _ranges(from_json(start), from_json(end))

    def read(self, partition: OffsetRange):
        return _read(self.options, partition)

    def commit(self, end: dict) -> None:
        # Progress lives in Spark's checkpoint; nothing is committed to the broker.
        pass

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


def rate_limit(begin: dict[TP, int], end: dict[TP, int], max_rows: int) -> dict[TP, int]:
    """Move at most `max_rows` offsets past `begin`, shared in proportion to each
    partition's backlog (floor), the remainder one by one in partition order."""
    backlog = {tp: max(0, e - begin.get(tp, 0)) for tp, e in end.items()}
    total = sum(backlog.values())
    if total <= max_rows:
        return end
    share = {tp: n * max_rows // total for tp, n in backlog.items()}
    spare = max_rows - sum(share.values())
    for tp in sorted(backlog):
        if spare == 0:
            break
        if share[tp] < backlog[tp]:
            share[tp] += 1
            spare -= 1
    return {tp: begin.get(tp, 0) + share[tp] if backlog[tp] else e for tp, e in end.items()}
