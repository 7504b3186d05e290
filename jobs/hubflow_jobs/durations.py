"""Human durations such as ``"30 seconds"`` or ``"2 min"``, as Spark's trigger strings spell them."""

from __future__ import annotations

import re

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
}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*$")


def parse_duration(text: str) -> float:
    """Return the number of seconds ``text`` means, e.g. ``"30 seconds"`` -> 30.0.

    Raises ``ValueError`` with a message a config author can act on when the text is not
    ``<number> <unit>`` with a unit among ms, s/seconds, min/minutes, h/hours, or is zero.
    """
    match = _PATTERN.match(str(text))
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(
            f"{text!r} is not a duration; write '<number> <unit>' such as '30 seconds', '500 ms', '2 minutes'"
        )
    seconds = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if seconds <= 0:
        raise ValueError(f"{text!r} must be longer than zero")
    return seconds
