"""What an Airflow task's context says about its run: who asked, whether it is a backfill, its interval.

Shared by the operators and the sensor, so "is this a backfill run" has one answer everywhere.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from hubflow.partitions import PartitionKeyError, partition_window


def requested_by(context: Any) -> str:
    """Who asked, for holds and markers: the DAG run's triggering user when Airflow says, and the run."""
    dag_run = context.get("dag_run")
    run_id = context.get("run_id") or getattr(dag_run, "run_id", None)
    user = getattr(dag_run, "triggering_user_name", None)
    return f"{user} (run {run_id})" if user else f"run {run_id}"


def is_backfill_run(context: Any) -> bool:
    """Whether the task runs in a backfill run (``airflow backfill create`` or the UI's Backfill)."""
    run_type = getattr(context.get("dag_run"), "run_type", None)
    return str(getattr(run_type, "value", run_type) or "").lower() in ("backfill", "backfill_job")


def run_partition_key(context: Any) -> str | None:
    """The DAG run's partition key (a ``<job>__backfill`` run's hour, a ``<job>__follow`` run's
    triggering hour), or None."""
    key = context.get("partition_key") or getattr(context.get("dag_run"), "partition_key", None)
    return str(key) if key else None


def backfill_window(context: Any) -> tuple[str, str] | None:
    """``(start, end)`` ISO times a run replaces: the hour its partition key names (a partitioned
    backfill run, a follow run), else a backfill run's data interval; None for other runs."""
    key = run_partition_key(context)
    if key is not None:
        try:
            start, end = partition_window(key)
        except PartitionKeyError as exc:
            raise AirflowFailException(str(exc)) from None
        return start.isoformat(), end.isoformat()
    if not is_backfill_run(context):
        return None
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    if start is None or end is None or start >= end:
        raise AirflowFailException(
            f"backfill run without a data interval ({start} .. {end}): the DAG's schedule must be a "
            "cron data-interval timetable"
        )
    return start.isoformat(), end.isoformat()


def is_true(flag: bool | str) -> bool:
    """A templated boolean parameter (``dry_run``): a bool, or the text a DAG run's params render to."""
    return str(flag).lower() in ("true", "1", "yes")
