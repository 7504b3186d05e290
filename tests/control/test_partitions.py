"""Hour partition keys: the key of an hour and the hour of a key, and keys that name no hour."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from hubflow.partitions import PartitionKeyError, partition_key, partition_window


def test_a_key_names_the_hour_it_was_made_from_in_utc() -> None:
    start = datetime(2026, 11, 28, 11, tzinfo=timezone(timedelta(hours=1)))  # 10:00 UTC
    key = partition_key(start)
    assert key == "2026-11-28T10:00:00"
    assert partition_window(key) == (start, start + timedelta(hours=1))
    assert partition_window(key)[0].tzinfo == UTC


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("2026-11-28", "names no hour"),
        ("yesterday", "names no hour"),
        ("2026-11-28T10:30:00", "not on the hour"),
    ],
)
def test_a_key_that_names_no_hour_is_refused_with_an_example(key: str, says: str) -> None:
    with pytest.raises(PartitionKeyError) as error:
        partition_window(key)
    assert (
        says in str(error.value) and repr(key) in str(error.value) and "e.g. '2026-11-28T" in str(error.value)
    )
