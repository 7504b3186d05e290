"""Runs started by events arriving on a hub: the registry's ``schedule: events`` grammar, the asset a
job's arrivals are announced on, and which arrivals are new. No Airflow import (the DAG factory
turns these plain values into an Airflow Asset with a watcher; the trigger in
``hubflow_plugins.triggers.event_arrivals`` polls the hub and calls :func:`new_arrivals`).

A scheduled job with ``schedule: events`` runs when its hub holds events that its checkpoint has
not committed and that no earlier announcement covered, instead of on a clock. ``events(<duration>)``
sets how often the hub is asked (its partitions' last enqueued sequence numbers: one management
request per partition, so the polling cost is bounded by partitions / interval, whatever the rate
of events).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from hubflow.durations import parse_positive_duration

#: What ``schedule: events`` accepts: ``events`` (poll every :data:`DEFAULT_POLL`) or
#: ``events(<duration>)``.
EVENTS_SCHEDULE = re.compile(r"^\s*events\s*(?:\((?P<every>[^()]*)\))?\s*$")
DEFAULT_POLL = timedelta(seconds=30)
#: The shortest poll: a management request per partition each time, against a service that
#: throttles management operations.
MIN_POLL = timedelta(seconds=1)
#: The extra keys of an arrival event (the trigger's payload, which Airflow keeps in the asset
#: event's extra under ``payload``).
EXTRA_JOB, EXTRA_HUB, EXTRA_NEW_EVENTS, EXTRA_PARTITIONS = "job", "hub", "new_events", "partitions"


class EventsScheduleError(ValueError):
    """A registry ``schedule: events(...)`` that cannot be read; the message says how to write it."""


@dataclass(frozen=True)
class EventsSchedule:
    """``schedule: events(<poll>)``: run when new events arrive, asking the hub every ``poll``."""

    poll: timedelta = DEFAULT_POLL


def parse_events_schedule(schedule: str) -> EventsSchedule | None:
    """``events`` or ``events(10 seconds)`` as an :class:`EventsSchedule`; None for any other schedule."""
    match = EVENTS_SCHEDULE.match(schedule)
    if match is None:
        if schedule.strip().startswith("events"):
            raise EventsScheduleError(
                f"schedule {schedule!r}: write events (ask the hub every {_seconds(DEFAULT_POLL)}) or "
                "events(<duration>), e.g. events(10 seconds)"
            )
        return None
    every = match["every"]
    if every is None:
        return EventsSchedule()
    try:
        poll = parse_positive_duration(every.strip())
    except ValueError as exc:
        raise EventsScheduleError(f"schedule {schedule!r}: {exc}") from None
    if poll < MIN_POLL:
        raise EventsScheduleError(
            f"schedule {schedule!r}: asking the hub more often than every {_seconds(MIN_POLL)} costs "
            "management requests the service throttles; write events(1 second) or longer"
        )
    return EventsSchedule(poll)


def arrivals_asset_name(job: str) -> str:
    """The asset a job's arrivals are announced on (its DAG is scheduled on it): ``<job>__events``."""
    return f"{job}__events"


def arrivals_asset_uri(job: str) -> str:
    """The asset's URI. The hub is named by the job's Airflow connection, which is read when the
    watcher runs, not when the DAG is parsed, so the URI names the job whose hub it watches."""
    return f"hubflow-events://{job}"


def new_arrivals(
    latest: dict[str, int], committed: dict[str, int], announced: dict[str, int]
) -> dict[str, tuple[int, int]]:
    """Per partition with new events, ``(first, end)``: the sequence numbers from ``first`` up to
    ``end`` (exclusive) that the job has not committed and no announcement covered.

    ``latest`` is each partition's next sequence number (last enqueued + 1), ``committed`` the end
    of the job's newest committed batch, ``announced`` the ``latest`` of the last announcement.
    A partition the job has not read and nobody announced starts at 0: a new job's first run reads
    whatever its starting position says, and it must run to find out.
    """
    arrivals = {}
    for partition, end in latest.items():
        first = max(committed.get(partition, 0), announced.get(partition, 0))
        if end > first:
            arrivals[partition] = (first, end)
    return arrivals


def _seconds(duration: timedelta) -> str:
    seconds = int(duration.total_seconds())
    return f"{seconds} second" + ("" if seconds == 1 else "s")
