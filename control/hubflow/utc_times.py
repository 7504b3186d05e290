"""Times written as text (status files, configs, command lines, storage listings), read as UTC.

One rule for every reader: ISO-8601 (``2026-11-22``, ``2026-11-22T10:00:00Z``, ``...+01:00``), a time
that names no zone is UTC (hubflow and Spark write UTC, and Airflow's data intervals are UTC), and
the result is an aware datetime in UTC. Callers say in their own words what was wrong.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def utc_time(value: Any) -> datetime | None:
    """``value`` (ISO-8601 text, or a datetime) as an aware UTC datetime; None when it is not one."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str) and value.strip():
        try:
            moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
    else:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)
