"""Hour partitions of the lake: the partition key a backfill run's asset events carry, and the
interval a key names. No Airflow import (the DAG factory builds the timetables, the operators read
the key).

A job's ``<job>__backfill`` DAG (streaming or scheduled) runs one backfill run per hour, each with
the hour as its partition key (Airflow's ``CronPartitionTimetable`` on :data:`PARTITION_CRON`, keys
formatted by :data:`KEY_FORMAT` in UTC); the events of the tables that run replaces carry that key. A job
scheduled on those tables (``schedule: asset(...)``) has ``<job>__follow``, run by those
partitioned events only, which replaces the same hour of its own tables (:func:`partition_window`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

#: One partition per hour, on the hour (UTC).
PARTITION_CRON = "0 * * * *"
PARTITION_LENGTH = timedelta(hours=1)
PARTITION_TIMEZONE = "UTC"
#: How a partition key spells its hour's start: Airflow's ``CronPartitionTimetable`` default.
KEY_FORMAT = "%Y-%m-%dT%H:%M:%S"


class PartitionKeyError(ValueError):
    """A partition key that names no hour of the lake; the message says what a key looks like."""


def partition_key(start: datetime) -> str:
    """The key of the hour starting at ``start`` (timezone-aware)."""
    return start.astimezone(UTC).strftime(KEY_FORMAT)


def partition_window(key: str) -> tuple[datetime, datetime]:
    """``[start, end)`` of the hour the partition key ``key`` names (UTC)."""
    try:
        start = datetime.strptime(key, KEY_FORMAT).replace(tzinfo=UTC)
    except (TypeError, ValueError):
        raise PartitionKeyError(
            f"partition key {key!r} names no hour: hubflow's keys are the hour's start in UTC, "
            f"e.g. {partition_key(datetime(2026, 11, 28, 10, tzinfo=UTC))!r}"
        ) from None
    if start.minute or start.second:
        raise PartitionKeyError(
            f"partition key {key!r} is not on the hour: hubflow's partitions are hours, e.g. "
            f"{partition_key(start.replace(minute=0, second=0))!r}"
        )
    return start, start + PARTITION_LENGTH


def backfill_dag_id(job: str) -> str:
    """The DAG whose backfill runs replace a job's hours: ``<job>__backfill``."""
    return f"{job}__backfill"


def follow_dag_id(job: str) -> str:
    """The DAG that replaces the hour of an ``asset(...)`` job's tables that its input's partitioned
    event names: ``<job>__follow``."""
    return f"{job}__follow"
