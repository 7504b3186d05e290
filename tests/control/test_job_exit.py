"""Which failed runs Airflow retries: every exit code of a job, and what the task log then says."""

from __future__ import annotations

import pytest

from hubflow.status.exit_codes import (
    EXIT_CONFIG_ERROR,
    EXIT_FAILED,
    EXIT_HELD,
    EXIT_KILLED,
    EXIT_LEASE_LOST,
    EXIT_LOCKED,
    EXIT_OK,
)
from hubflow.supervision.job_exit import judge_failed_run, run_outcome


@pytest.mark.parametrize(
    ("code", "says"),
    [
        (EXIT_CONFIG_ERROR, ["refused its config (exit 2)", "fix what the driver log above names"]),
        (EXIT_HELD, ["job orders is held by on-call (exit 4)", "on-call DAG orders__oncall (action start)"]),
        (EXIT_KILLED, ["killed on request (a KILL marker, exit 6)", "clear this task to run it again"]),
    ],
)
def test_a_failure_no_retry_can_cure_fails_at_once_saying_what_to_do(code: int, says: list[str]) -> None:
    verdict = judge_failed_run("orders", code)
    assert not verdict.retry
    assert "job orders" in verdict.message
    for text in says:
        assert text in verdict.message


@pytest.mark.parametrize(
    ("code", "says"),
    [
        (EXIT_FAILED, "the run of job orders failed (exit 1); "),
        (EXIT_LOCKED, "another instance of job orders holds its lease (exit 3)"),
        (EXIT_LEASE_LOST, "the run of job orders lost its lease (exit 5)"),
        (-9, "was ended by signal SIGKILL (exit -9)"),
        (137, "was ended by signal SIGKILL (exit 137)"),
        (143, "was ended by signal SIGTERM (exit 143)"),
        (101, "failed with exit 101 (not one of the job's own codes)"),
        (EXIT_OK, "exited 0 but the Spark provider reported a failure"),
        (None, "did not report an exit code"),
    ],
)
def test_any_other_failure_is_retried_and_a_retry_resumes_from_the_checkpoint(
    code: int | None, says: str
) -> None:
    verdict = judge_failed_run("orders", code)
    assert verdict.retry
    assert says in verdict.message
    assert "a retry resumes from the checkpoint: committed batches are not run again" in verdict.message


def test_a_backfill_run_is_named_so_and_its_retry_replaces_the_interval() -> None:
    retried = judge_failed_run("orders", EXIT_FAILED, backfill=True)
    assert retried.retry
    assert retried.message.startswith("the backfill run of job orders failed (exit 1)")
    assert "a retry replaces the interval's rows again, never adding to them" in retried.message
    refused = judge_failed_run("orders", EXIT_CONFIG_ERROR, backfill=True)
    assert not refused.retry and "refused its config or backfill window (exit 2)" in refused.message


def test_every_exit_code_the_jobs_own_has_a_verdict() -> None:
    from hubflow.status import exit_codes

    codes = {getattr(exit_codes, name) for name in dir(exit_codes) if name.startswith("EXIT_")} - {EXIT_OK}
    assert {code for code in codes if not judge_failed_run("orders", code).retry} == {
        EXIT_CONFIG_ERROR,
        EXIT_HELD,
        EXIT_KILLED,
    }
    generic = "not one of the job's own codes"
    assert not any(generic in judge_failed_run("orders", code).message for code in codes)


def test_a_failed_run_is_told_with_the_reason_it_wrote_to_its_status() -> None:
    reason = "job orders failed: StreamingQueryException: [PATH_NOT_FOUND] /landing"
    verdict = judge_failed_run("orders", EXIT_FAILED, reason=reason)
    assert verdict.retry
    assert f"the run of job orders failed (exit 1): {reason}; " in verdict.message
    assert "the driver log above has the details" in verdict.message


def test_the_reason_is_read_only_from_the_status_of_this_run() -> None:
    earlier = "2026-11-27T10:00:00+00:00"
    this_run = {"started_at": "2026-11-27T11:00:00+00:00", "exit_code": 1, "outcome": "job orders failed: X"}
    assert run_outcome(this_run, earlier) == "job orders failed: X"
    # status.json still the earlier run's (this run ended before writing one): its outcome is not this run's
    assert run_outcome({**this_run, "started_at": earlier}, earlier) is None
    assert run_outcome(None, earlier) is None
    assert run_outcome({"started_at": "2026-11-27T11:00:00+00:00", "outcome": None}, earlier) is None
