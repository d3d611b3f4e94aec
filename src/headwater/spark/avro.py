"""Avro-encoded topics in a pipeline: values in Confluent's wire format (magic byte 0, the
schema id in 4 bytes big-endian, then the Avro body, as confluent-kafka's AvroSerializer and
Java's KafkaAvroSerializer write them) decoded with spark-avro's `from_avro` (`make jvm` puts
it on spark.jars next to the Kafka connector), the schema fetched from the schema registry
by subject.

`from_avro` decodes with one schema, so every record must carry that schema's id: a record
written with another one (an older version) fails the query with the ids, never decodes to
wrong values."""
from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from headwater.schemas.avro_records import registry_client

PREFIX = 5   # magic byte and schema id


def registered_schema(registry_url: str, subject: str, version: int | None = None,
                      registry_config: dict[str, str] | None = None) -> tuple[int, str]:
    """The id and Avro schema JSON of the subject's version (default: its latest)."""
    client = registry_client(registry_url, registry_config)
    found = client.get_version(subject, version) if version else client.get_latest_version(subject)
    if found.schema.schema_type not in (None, "AVRO"):
        raise ValueError(f"{subject} version {found.version} is {found.schema.schema_type}, not Avro")
    if found.schema.references:
        raise ValueError(f"{subject} version {found.version} has references; from_avro needs one self-contained schema")
    return found.schema_id, found.schema.schema_str


def decode_avro(value: Column, schema_id: int, schema: str) -> Column:
    """A Confluent-framed Avro value as a struct; a record of another schema id fails the query."""
    magic = F.substring(value, 1, 1)
    written_id = F.conv(F.hex(F.substring(value, 2, 4)), 16, 10).cast("long")
    framed = (magic == F.unhex(F.lit("00"))) & (written_id == schema_id)
    why = F.concat(F.lit(f"not Confluent Avro of schema id {schema_id}: magic 0x"), F.hex(magic),
                   F.lit(", schema id "), written_id.cast("string"))
    body = F.substring(value, PREFIX + 1, 1 << 30)    # Spark's substring: 1-based, to the end
    return F.when(value.isNull(), F.lit(None)).when(framed, from_avro(body, schema)).otherwise(F.raise_error(why))


def avro_values(frame, registry_url: str, subject: str, column: str = "value", version: int | None = None,
                registry_config: dict[str, str] | None = None):
    """`frame` (a Kafka source's rows) with `column` decoded by the subject's schema."""
    schema_id, schema = registered_schema(registry_url, subject, version, registry_config)
    return frame.withColumn(column, decode_avro(F.col(column), schema_id, schema))
