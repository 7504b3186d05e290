"""Reading a Delta table incrementally: the ``source:`` keys of jobs that stream from the lake.

delta-spark's streaming source reads the rows each commit added, in commit order; its offsets
(table version, index in the version) live in the query's checkpoint, so a restart resumes
exactly after the last committed batch. The config keys map to its options:

==========================  ==========================  =============================================
key                         Delta option                meaning
==========================  ==========================  =============================================
``max_files_per_trigger``   ``maxFilesPerTrigger``      at most this many new files per micro-batch
``max_bytes_per_trigger``   ``maxBytesPerTrigger``      about this many bytes per micro-batch (soft)
``starting_version``        ``startingVersion``         a new checkpoint starts at this table
                                                        version (or ``latest``: only new commits)
``starting_timestamp``      ``startingTimestamp``       ... or at the first commit at/after this time
``skip_change_commits``     ``skipChangeCommits``       ignore commits that remove or rewrite rows
==========================  ==========================  =============================================

Without ``skip_change_commits`` a commit that removes rows (a DELETE, an UPDATE, a backfill's
``replaceWhere``) fails the query, because the removed rows were already passed downstream; with
it, such commits are skipped whole (their added rows too). Compaction (``OPTIMIZE``) commits with
``dataChange=false`` and is never read again either way. Both triggers work: availableNow reads
what is there in batches of the sizes above, then stops.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from hubflow.config import KeyedValueError, StrictModel, checks_environment, is_local, local_path
from hubflow.utc_times import utc_time

_BYTE_UNITS = {"b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3, "tb": 1024**4}


def parse_bytes(value: int | str) -> int:
    """``"64 MB"``, ``"1 GB"``, ``"512kb"`` or a plain number of bytes, as bytes (> 0)."""
    if isinstance(value, int) and not isinstance(value, bool):
        number, unit = float(value), "b"
    else:
        text = str(value).strip().lower().replace(" ", "")
        digits = text.rstrip("kmgtb")
        unit = text[len(digits) :] or "b"
        try:
            number = float(digits)
        except ValueError:
            number, unit = -1.0, "?"
    if unit not in _BYTE_UNITS or number <= 0:
        raise ValueError(f"{value!r} is not a size; write e.g. '64 MB', '1 GB' or a number of bytes")
    return int(number * _BYTE_UNITS[unit])


def parse_timestamp(value: str) -> datetime:
    """An ISO-8601 date or time (UTC when it names no zone)."""
    moment = utc_time(str(value))
    if moment is None:
        raise ValueError(
            f"{value!r} is not an ISO-8601 date or time, e.g. 2026-11-22 or 2026-11-22T10:00:00Z"
        )
    return moment


class DeltaReadOptions(StrictModel):
    """How much of a Delta table each micro-batch reads and where a new checkpoint starts."""

    max_files_per_trigger: int = Field(default=100, gt=0)
    max_bytes_per_trigger: int | str | None = None
    starting_version: int | Literal["latest"] | None = None
    starting_timestamp: str | None = None
    skip_change_commits: bool = False

    @field_validator("max_bytes_per_trigger")
    @classmethod
    def _size(cls, value: int | str | None) -> int | str | None:
        if value is not None:
            parse_bytes(value)
        return value

    @field_validator("starting_version")
    @classmethod
    def _version(cls, value: int | str | None) -> int | str | None:
        if isinstance(value, int) and value < 0:
            raise ValueError("must be >= 0 (a table version) or 'latest'")
        return value

    @field_validator("starting_timestamp")
    @classmethod
    def _timestamp(cls, value: str | None) -> str | None:
        if value is not None:
            parse_timestamp(value)
        return value

    @model_validator(mode="after")
    def _one_start(self) -> DeltaReadOptions:
        if self.starting_version is not None and self.starting_timestamp is not None:
            raise KeyedValueError(
                "starting_timestamp", "set starting_version or starting_timestamp, not both"
            )
        return self

    def delta_options(self) -> dict[str, str]:
        """The options for ``readStream.format("delta")``."""
        options = {"maxFilesPerTrigger": str(self.max_files_per_trigger)}
        if self.max_bytes_per_trigger is not None:
            options["maxBytesPerTrigger"] = str(parse_bytes(self.max_bytes_per_trigger))
        if self.starting_version is not None:
            options["startingVersion"] = str(self.starting_version)
        if self.starting_timestamp is not None:
            moment = parse_timestamp(self.starting_timestamp).astimezone(UTC)
            # Delta casts the text to a timestamp in the session's time zone (UTC in every job).
            options["startingTimestamp"] = moment.strftime("%Y-%m-%d %H:%M:%S.%f")
        if self.skip_change_commits:
            options["skipChangeCommits"] = "true"
        return options


def check_delta_table(path: str) -> str:
    """``path`` if it may hold a Delta table; a local folder must have its ``_delta_log``."""
    if is_local(path) and not (local_path(path) / "_delta_log").is_dir():
        raise ValueError(
            f"{path} is not a Delta table (no _delta_log/): run the job that writes it first, or fix the path"
        )
    return path


class DeltaSourceConfig(DeltaReadOptions):
    """``source:`` of a job that streams a Delta table: its ``path`` and the read options."""

    path: str = Field(min_length=1)

    @field_validator("path")
    @classmethod
    def _is_delta(cls, value: str, info: ValidationInfo) -> str:
        return check_delta_table(value) if checks_environment(info) else value


def read_delta_stream(spark: Any, path: str, options: DeltaReadOptions) -> Any:
    """A streaming DataFrame of the rows added to the Delta table at ``path`` (schema: the table's)."""
    return spark.readStream.format("delta").options(**options.delta_options()).load(path)
