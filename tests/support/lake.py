"""Reading the lake's Delta tables the ways its users do: Spark, delta-rs and DuckDB's Delta extension.

Each reader returns plain tuples, timestamps as microseconds since the epoch and dates as ISO
text, so rows from different readers compare equal without time-zone conversions in between.
DuckDB cannot download extensions here: its Delta extension (a delta-kernel reader) is loaded from
the file the PyPI package ``duckdb-extension-delta`` ships, with unsigned extensions allowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def delta_extension_file() -> Path:
    """The DuckDB Delta extension binary of the installed ``duckdb-extension-delta`` package."""
    import duckdb
    import duckdb_extension_delta

    folder = Path(duckdb_extension_delta.__file__).parent / "extensions" / f"v{duckdb.__version__}"
    (found,) = folder.glob("delta.duckdb_extension")
    return found


def _spark_column(name: str, kind: str) -> str:
    if kind == "timestamp":
        return f"unix_micros(`{name}`)"
    if kind == "date":
        return f"cast(`{name}` AS STRING)"
    return f"`{name}`"


def spark_rows(spark: Any, table: str | Path, columns: dict[str, str]) -> list[tuple]:
    """Rows of the Delta table as Spark reads them; ``columns``: name -> value|timestamp|date."""
    frame = spark.read.format("delta").load(str(table))
    selected = frame.selectExpr(*[_spark_column(n, k) for n, k in columns.items()]).collect()
    return sorted(tuple(_plain(v) for v in row) for row in selected)


def delta_rs_rows(table: str | Path, columns: dict[str, str]) -> list[tuple]:
    """Rows of the Delta table as delta-rs (PyPI ``deltalake``) reads them."""
    import pyarrow as pa
    from deltalake import DeltaTable

    data = DeltaTable(str(table)).to_pyarrow_table(columns=list(columns))
    values = []
    for name, kind in columns.items():
        column = data.column(name)
        if kind == "timestamp":
            column = column.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        elif kind == "date":
            column = column.cast(pa.string())
        values.append(column.to_pylist())
    return sorted(tuple(_plain(v) for v in row) for row in zip(*values, strict=True))


def duckdb_rows(table: str | Path, columns: dict[str, str]) -> list[tuple]:
    """Rows of the Delta table as DuckDB's Delta extension reads them."""
    import duckdb

    connection = duckdb.connect(
        config={
            "allow_unsigned_extensions": "true",
            "autoinstall_known_extensions": "false",
            "autoload_known_extensions": "false",
        }
    )
    try:
        connection.execute(f"LOAD '{delta_extension_file()}'")
        expressions = []
        for name, kind in columns.items():
            if kind == "timestamp":
                expressions.append(f'epoch_us("{name}")')
            elif kind == "date":
                expressions.append(f'CAST("{name}" AS VARCHAR)')
            else:
                expressions.append(f'"{name}"')
        query = f"SELECT {', '.join(expressions)} FROM delta_scan(?)"
        found = connection.execute(query, [str(table)]).fetchall()
        return sorted(tuple(_plain(v) for v in row) for row in found)
    finally:
        connection.close()


def _plain(value: Any) -> Any:
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


def delta_version(table: str | Path) -> int:
    """The table's current version (delta-rs)."""
    from deltalake import DeltaTable

    return DeltaTable(str(table)).version()


def recorded_batch(table: str | Path, query_id: str) -> int | None:
    """The batch id the table's log records for the streaming query ``query_id`` (its ``txn``)."""
    from deltalake import DeltaTable

    return DeltaTable(str(table)).transaction_version(query_id)
