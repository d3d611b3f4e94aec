"""Column types in Avro, in-process: PostgreSQL's text forms and SQLite's declared types (the
affinity examples of SQLite's documentation), and Avro names from topic and column names."""
import pytest

from headwater.cdc import CdcError
from headwater.cdc.avro_columns import check_names, postgres_column, sqlite_column
from headwater.cdc.avro_events import namespace

TIMESTAMPTZ, TIMESTAMP, DATE, NUMERIC, UUID = 1184, 1114, 1082, 1700, 2950


@pytest.mark.parametrize("type_oid, text, value", [
    (TIMESTAMPTZ, "1970-01-01 00:00:01.5+00", 1_500_000),
    (TIMESTAMPTZ, "1969-12-31 23:59:59.999999+00", -1),
    (TIMESTAMPTZ, "1970-01-01 02:00:00+02", 0),
    (TIMESTAMP, "1970-01-01 00:00:01", 1_000_000),            # without a time zone: UTC
    (TIMESTAMPTZ, "infinity", 2 ** 63 - 1), (TIMESTAMP, "-infinity", -2 ** 63),
    (DATE, "1970-01-02", 1), (DATE, "1969-12-31", -1), (DATE, "infinity", 2 ** 31 - 1),
    (NUMERIC, "12345678901234567890.000000001", "12345678901234567890.000000001"),
    (UUID, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
])
def test_postgres_text_as_avro_values(type_oid, text, value):
    assert postgres_column("c", type_oid).convert(text) == value


@pytest.mark.parametrize("declared, avro_type", [
    ("INT", "long"), ("BIGINT", "long"), ("UNSIGNED BIG INT", "long"), ("CHARACTER(20)", "string"),
    ("NVARCHAR(100)", "string"), ("CLOB", "string"), ("BLOB", "bytes"), ("", "string"), ("DOUBLE PRECISION", "double"),
    ("FLOAT", "double"), ("NUMERIC", "string"), ("DECIMAL(10,5)", "string"), ("BOOLEAN", "string"),
    ("DATETIME", "string"), ("FLOATING POINT", "long"), ("CHARINT", "long"),   # INT wins: the rules' order
])
def test_sqlite_declared_types_by_affinity(declared, avro_type):
    assert sqlite_column("c", declared).type == avro_type


def test_sqlite_values_that_do_not_fit_are_refused():
    with pytest.raises(ValueError):
        sqlite_column("c", "INTEGER").convert("ten")
    assert sqlite_column("c", "NUMERIC").convert(2.5) == "2.5" and sqlite_column("c", "").convert(7) == "7"


def test_avro_names():
    assert namespace("my-app.public.2024 sales") == "my_app.public._2024_sales"
    check_names("public.t", [postgres_column("snake_Case9", 25)])
    with pytest.raises(CdcError, match="table public.t: column 'order id' is not a valid Avro field name"):
        check_names("public.t", [postgres_column("order id", 25)])
