"""Which landing folders hold an interval: whole folders only, in order, each once."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hubflow_jobs.interval_folders import IntervalFolderError, check_pattern, folders_of_interval


def _t(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_an_hourly_interval_is_one_hourly_folder() -> None:
    assert folders_of_interval("%Y/%m/%d/%H", _t("2026-11-22T10:00"), _t("2026-11-22T11:00")) == [
        "2026/11/22/10"
    ]


def test_a_daily_interval_over_hive_style_hourly_folders_is_24_folders_in_order() -> None:
    folders = folders_of_interval("date=%Y-%m-%d/hour=%H", _t("2026-11-22T00:00"), _t("2026-11-23T00:00"))
    assert folders == [f"date=2026-11-22/hour={h:02d}" for h in range(24)]


def test_a_monthly_interval_over_daily_folders_crosses_no_month_boundary() -> None:
    folders = folders_of_interval("%Y%m%d", _t("2026-02-01T00:00"), _t("2026-03-01T00:00"))
    assert folders == [f"202602{d:02d}" for d in range(1, 29)]


def test_a_pattern_without_the_date_still_lists_each_folder_once() -> None:
    assert folders_of_interval("%H", _t("2026-11-22T00:00"), _t("2026-11-24T00:00")) == [
        f"{h:02d}" for h in range(24)
    ]


@pytest.mark.parametrize(
    ("start", "end", "which"),
    [("2026-11-22T10:30", "2026-11-22T11:00", "start"), ("2026-11-22T10:00", "2026-11-22T11:15", "end")],
)
def test_an_interval_that_cuts_a_folder_is_refused(start: str, end: str, which: str) -> None:
    with pytest.raises(IntervalFolderError, match=f"interval's {which} .* whole folders"):
        folders_of_interval("%Y/%m/%d/%H", _t(start), _t(end))


def test_an_interval_of_too_many_folders_is_refused() -> None:
    with pytest.raises(IntervalFolderError, match="more than 100000 folders"):
        folders_of_interval("%Y%m%d%H%M%S", _t("2026-01-01T00:00"), _t("2026-01-03T00:00"))


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("%Y/%B", "only %Y %m %d %j %H %M %S"),
        ("landing", "must contain a time field"),
        ("/%Y/%m", "relative to source.path"),
        ("%Y/../%m", "relative to source.path"),
    ],
)
def test_unusable_patterns_are_refused_with_the_reason(pattern: str, problem: str) -> None:
    with pytest.raises(IntervalFolderError, match=problem):
        check_pattern(pattern)
