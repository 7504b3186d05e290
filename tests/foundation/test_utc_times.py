"""The one rule for times written as text: ISO-8601, naive is UTC, the result aware and in UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from hubflow.status import age_seconds
from hubflow.utc_times import utc_time
from hubflow_jobs.backfill_window import WindowError, parse_window

TEN = datetime(2026, 11, 22, 10, tzinfo=UTC)


@pytest.mark.parametrize(
    "text",
    ["2026-11-22T10:00:00Z", "2026-11-22T10:00:00", "2026-11-22 10:00:00+00:00", "2026-11-22T11:00:00+01:00"],
)
def test_every_spelling_of_one_moment_is_the_same_utc_time(text: str) -> None:
    moment = utc_time(text)
    assert moment == TEN and moment.tzinfo == UTC


def test_what_is_not_a_time_is_none_and_a_datetime_is_taken_as_it_is() -> None:
    assert [utc_time(v) for v in ("", "  ", "yesterday", "2026-13-01", None, 12)] == [None] * 6
    assert utc_time(datetime(2026, 11, 22, 10)) == TEN
    assert utc_time(datetime(2026, 11, 22, 5, tzinfo=timezone(timedelta(hours=-5)))) == TEN


def test_its_readers_agree() -> None:
    assert age_seconds("2026-11-22T10:00:00", now=TEN + timedelta(seconds=30)) == 30
    assert age_seconds("not a time") is None
    assert parse_window("2026-11-22T11:00:00+01:00", "2026-11-22T11:00:00Z") == (
        TEN,
        TEN + timedelta(hours=1),
    )
    with pytest.raises(
        WindowError, match=r"window times must be ISO-8601, e\.g\. 2026-11-22T10:00:00Z: 'soon' is not"
    ):
        parse_window("soon", "2026-11-22T11:00:00Z")
