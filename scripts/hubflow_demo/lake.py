"""The lake's Delta tables read back with delta-rs, as any non-Spark reader would."""

from __future__ import annotations

from pathlib import Path


def table_rows(path: Path, *columns: str) -> list[tuple]:
    """The rows of a Delta table (only ``columns``), read with delta-rs; none before its first commit."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(str(path)).to_pyarrow_dataset().to_table(columns=list(columns))
    except TableNotFoundError:
        return []
    return list(zip(*(table.column(name).to_pylist() for name in columns), strict=True))


def row_count(path: Path) -> int:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(str(path)).to_pyarrow_dataset().count_rows()
    except TableNotFoundError:  # nothing committed yet reads as zero rows
        return 0
