"""The one duration grammar: the union of what job configs and the Airflow registry each accepted."""

from __future__ import annotations

from datetime import timedelta

import pytest

from hubflow.durations import parse_duration, parse_positive_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # job configs' spellings (Spark trigger style)
        ("500 ms", timedelta(milliseconds=500)),
        ("2 min", timedelta(minutes=2)),
        ("30s", timedelta(seconds=30)),
        ("1.5 h", timedelta(minutes=90)),
        # the registry's spellings (schedules, retentions)
        ("15 minutes", timedelta(minutes=15)),
        ("2 hours", timedelta(hours=2)),
        ("1 day", timedelta(days=1)),
        ("7 days", timedelta(days=7)),
        ("30 Seconds", timedelta(seconds=30)),
        ("0 hours", timedelta(0)),
    ],
)
def test_both_former_grammars_parse_to_a_timedelta(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["soon", "2 fortnights", "minutes", "-1 day", "1 day 2 hours", ""])
def test_not_a_duration_says_what_to_write(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration; write '<number> <unit>'"):
        parse_duration(text)


def test_positive_duration_refuses_zero_and_keeps_the_value_otherwise() -> None:
    assert parse_positive_duration("1 day") == timedelta(days=1)
    with pytest.raises(ValueError, match="'0 s' must be longer than zero"):
        parse_positive_duration("0 s")
