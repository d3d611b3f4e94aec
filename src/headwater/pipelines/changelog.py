"""Reading a table's changelog from a (compacted) topic.

The shape CDC produces and compaction keeps: key = the row's id, value = the row as
JSON, a null value (tombstone) = the row was deleted. Compaction keeps the latest value
per key, so reading the topic from the beginning rebuilds the table.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def changes(records: DataFrame, row_schema: str) -> DataFrame:
    """Records of a `headwater` (or `kafka`) source as changes: id, row (struct, null for
    a delete), deleted, change_time (the record timestamp), topic, partition, offset."""
    return records.select(
        F.col("key").cast("string").alias("id"),
        F.from_json(F.col("value").cast("string"), row_schema).alias("row"),
        F.col("value").isNull().alias("deleted"),
        F.col("timestamp").alias("change_time"),
        "topic", "partition", "offset",
    )
