"""Health checks on real checkpoints: the judgement the sensor and the trigger share."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from hubflow.supervision.health import (
    HEALTHY_STREAMING,
    check_health,
    committed_sequence_numbers,
)
from tests.plugins.file_streams import FileStream, age_files

pytestmark = pytest.mark.integration


def test_stalled_is_healthy_only_while_the_job_is_alive(spark, tmp_path: Path):
    stream = FileStream(spark, tmp_path / "s")
    stream.land_and_run(batches=1, files_per_batch=1)
    age_files(stream.checkpoint, 7200)
    dead = check_health(str(stream.checkpoint), stalled_after=timedelta(hours=1), accept=HEALTHY_STREAMING)
    assert dead.verdict == "stalled" and dead.failed
    idle = check_health(
        str(stream.checkpoint), stalled_after=timedelta(hours=1), accept=HEALTHY_STREAMING, live_state="idle"
    )
    assert idle.done and not idle.failed and "waiting for new input" in idle.reason


def test_lag_is_measured_against_the_committed_event_hubs_offsets(spark, tmp_path: Path):
    report = {"sources": [{"committed_end_offset": json.dumps({"hub": {"0": 10, "1": 7}})}]}
    assert committed_sequence_numbers(report, "hub") == {"0": 10, "1": 7}
    assert committed_sequence_numbers(report, "other") == {}
    stream = FileStream(spark, tmp_path / "s")
    stream.land_and_run(batches=1, files_per_batch=1)
    # A file-source checkpoint has no Event Hubs offsets: every event the hub holds counts as lag.
    result = check_health(
        str(stream.checkpoint),
        stalled_after=timedelta(hours=1),
        latest=("hub", {"0": 12, "1": 3}),
        max_lag_events=10,
    )
    assert result.lag == {"0": 12, "1": 3}
    assert result.failed and "lag is 15 events" in result.reason
