"""The quarantine review's operators called directly on real status folders (no scheduler, no Spark):
what the question says, when it is not asked, and the answers that start nothing. The whole review
through Airflow (Required Actions, REST and browser answers, a resumed job) is in
tests/dags/test_quarantine_review.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from hubflow.operations.audit import read_audit
from hubflow.status import HoldKind, StatusFolder
from hubflow_plugins.operators.quarantine_review import QuarantineAnswerOperator, QuarantineQuestionOperator

pytestmark = pytest.mark.integration

RUN = "asset_triggered__1"


def _folder(tmp_path: Path) -> StatusFolder:
    return StatusFolder(str(tmp_path / "clicks" / "status" / "clicks"))


def _answered(option: str | None, user: dict[str, str] | None = None, **params: Any) -> dict[str, Any]:
    """The context of ``carry_out_answer`` after ``user`` chose ``option`` (HITL's result in XCom)."""
    result = {
        "chosen_options": [option] if option else [],
        "params_input": {"reason": None, "rewind_to_enqueued_time": None, **params},
        "responded_by_user": user,
    }
    ti = SimpleNamespace(
        try_number=1, xcom_pull=lambda task_ids: result if task_ids == "ask_oncall" else None
    )
    dag_run = SimpleNamespace(run_type="asset_triggered", run_id=RUN, triggering_user_name=None)
    return {"ti": ti, "dag_run": dag_run, "run_id": RUN}


def _answer() -> QuarantineAnswerOperator:
    return QuarantineAnswerOperator(
        task_id="carry_out_answer", job_name="clicks", question_task_id="ask_oncall"
    )


def test_a_job_no_longer_quarantined_is_not_asked_about(registry: Path, tmp_path: Path) -> None:
    question = QuarantineQuestionOperator(task_id="ask_oncall", job_name="clicks")
    with pytest.raises(AirflowSkipException, match="job clicks is not quarantined"):
        question.execute({"run_id": RUN})
    _folder(tmp_path).place_hold("on-call stop", by="bob", kind=HoldKind.STOP)
    with pytest.raises(AirflowSkipException, match="not quarantined"):
        question.execute({"run_id": RUN})


def test_keep_held_does_nothing_and_records_the_responders_decision(registry: Path, tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    hold = folder.place_hold("crash-looping", by="run scheduled__1", kind=HoldKind.QUARANTINE)
    done = _answer().execute(_answered("Keep held", {"id": "olga", "name": "olga"}, reason="still broken"))
    assert done["done"] == [
        f"job clicks is held by run scheduled__1 for a quarantine since {hold.at} (crash-looping): "
        "kept held, nothing done"
    ]
    assert folder.hold() == hold, "the quarantine stays"
    (entry,) = read_audit(folder)
    assert (entry.by, entry.action, entry.reason, entry.source) == (
        f"olga (run {RUN})",
        "keep held",
        "still broken",
        "airflow",
    )
    assert entry.hold_before == entry.hold_after == hold.describe() and entry.outcome.startswith("done: ")


def test_an_answer_nobody_gave_acts_on_nothing(registry: Path, tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    folder.place_hold("crash-looping", by="run scheduled__1", kind=HoldKind.QUARANTINE)
    with pytest.raises(AirflowFailException, match="no answer from a person"):
        _answer().execute(_answered("Resume", None))
    assert read_audit(folder) == [] and folder.hold() is not None


def test_rewind_of_a_job_without_a_hub_is_refused_under_the_responders_name(
    registry: Path, tmp_path: Path
) -> None:
    folder = _folder(tmp_path)
    folder.place_hold("crash-looping", by="run scheduled__1", kind=HoldKind.QUARANTINE)
    with pytest.raises(AirflowFailException, match="only Event Hubs jobs rewind"):
        _answer().execute(
            _answered("Rewind", {"id": "7", "name": "olga"}, rewind_to_enqueued_time="2026-11-01T00:00Z")
        )
    (entry,) = read_audit(folder)
    assert (entry.by, entry.action, entry.reason) == (
        f"olga (run {RUN})",
        "rewind",
        "Rewind (quarantine review)",
    )
    assert entry.outcome.startswith("refused: ") and folder.hold() is not None
