"""Which landing folders hold one data interval's files, from an strftime pattern.

A file job whose landing area is laid out by time (``2026/11/22/10/``, ``date=2026-11-22/hour=10/``)
names that layout in ``source.interval_folder``. A backfill of ``[start, end)`` then reads exactly
the folders whose time lies in the interval - no file of a neighbouring interval, so two intervals
never share a file and reruns never duplicate. Folder times are UTC, like Airflow's data intervals.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

#: strftime directives an interval folder may use (calendar fields only: names and weekdays would
#: make folders that do not sort or align with intervals).
ALLOWED_DIRECTIVES = set("YmdHMSj%")
#: The finest time unit a directive names: stepping by it visits every folder of an interval.
_STEP = {"S": timedelta(seconds=1), "M": timedelta(minutes=1), "H": timedelta(hours=1)}
_DAY = timedelta(days=1)
#: An interval may span at most this many folders (a year of hourly folders is under 9,000).
MAX_FOLDERS = 100_000
_DIRECTIVE = re.compile(r"%(.)")


class IntervalFolderError(ValueError):
    """The pattern is unusable, or an interval does not start and end on folder boundaries."""


def check_pattern(pattern: str) -> str:
    """Return ``pattern`` if it is a relative strftime folder pattern with at least one time field."""
    directives = _DIRECTIVE.findall(pattern)
    unknown = sorted({d for d in directives if d not in ALLOWED_DIRECTIVES})
    if unknown:
        raise IntervalFolderError(
            f"uses {', '.join('%' + d for d in unknown)}; only %Y %m %d %j %H %M %S are allowed"
        )
    if not [d for d in directives if d != "%"]:
        raise IntervalFolderError("must contain a time field such as %Y, %d or %H")
    if pattern.startswith("/") or "://" in pattern or ".." in pattern.split("/"):
        raise IntervalFolderError("must be a folder relative to source.path (no leading /, no ..)")
    return pattern


def _step(pattern: str) -> timedelta:
    directives = set(_DIRECTIVE.findall(pattern))
    for directive, step in _STEP.items():
        if directive in directives:
            return step
    return _DAY


def _starts_folder(pattern: str, moment: datetime) -> bool:
    """Whether ``moment`` is the first instant of its folder."""
    return moment.strftime(pattern) != (moment - timedelta(microseconds=1)).strftime(pattern)


def folders_of_interval(pattern: str, start: datetime, end: datetime) -> list[str]:
    """The folders (relative, in time order) holding the files of ``[start, end)``.

    Refuses an interval that cuts a folder in two: reading that folder would take files of the
    neighbouring interval too (and the neighbour's backfill would take them again).
    """
    check_pattern(pattern)
    for name, moment in (("start", start), ("end", end)):
        if not _starts_folder(pattern, moment):
            raise IntervalFolderError(
                f"the interval's {name} {moment.isoformat()} falls inside the folder "
                f"{moment.strftime(pattern)!r} of pattern {pattern!r}: each interval must cover whole "
                "folders; use a schedule whose intervals start and end on folder boundaries, or a "
                "finer pattern"
            )
    step = _step(pattern)
    if (end - start) / step > MAX_FOLDERS:
        raise IntervalFolderError(
            f"[{start.isoformat()}, {end.isoformat()}) spans more than {MAX_FOLDERS} folders of "
            f"{pattern!r}; backfill shorter intervals"
        )
    folders: dict[str, None] = {}  # ordered and without repeats
    moment = start
    while moment < end:
        folders[moment.strftime(pattern).strip("/")] = None
        moment += step
    return list(folders)
