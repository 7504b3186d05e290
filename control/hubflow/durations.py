"""The project's one grammar for human durations such as ``"30 seconds"``, ``"500 ms"`` or ``"1 day"``.

Job configs (triggers, timeouts, windows) and the Airflow registry (schedules, retentions) both
read their durations here, so a value that is valid in one place is valid in the other. It imports
nothing beyond the standard library, so DAG parsing can use it without Spark.
"""

from __future__ import annotations

import re
from datetime import timedelta

_UNITS = {
    "ms": 0.001,
    "millisecond": 0.001,
    "milliseconds": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "mins": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*$")


def parse_duration(text: str) -> timedelta:
    """Return the duration ``text`` means, e.g. ``"30 seconds"`` -> ``timedelta(seconds=30)``.

    ``text`` is ``<number> <unit>`` with a unit among ms, s/seconds, min/minutes, h/hours,
    d/days. Zero is allowed (e.g. a ``"0 hours"`` vacuum retention); where it makes no sense
    use :func:`parse_positive_duration`. Raises ``ValueError`` with a message a config author
    can act on.
    """
    match = _PATTERN.match(str(text))
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(
            f"{text!r} is not a duration; write '<number> <unit>' such as '30 seconds', '500 ms', "
            "'2 minutes', '1 day'"
        )
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2).lower()])


def parse_positive_duration(text: str) -> timedelta:
    """Like :func:`parse_duration`, and refuses zero (a trigger interval, a timeout, a window)."""
    duration = parse_duration(text)
    if duration <= timedelta(0):
        raise ValueError(f"{text!r} must be longer than zero")
    return duration
