"""The quarantine review's two tasks: ask on-call in Airflow's Required Actions, then carry out the
answer through the on-call core under the name of the person who answered.

Thin on purpose: the question is the standard provider's :class:`HITLOperator` with the job's hold
filled in (:mod:`hubflow.operations.quarantine_review` says what it asks); the answer is a
:class:`StreamingJobOperator` whose action, force, reason and user come from the question's result.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.standard.operators.hitl import HITLOperator
from airflow.sdk import Param
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from hubflow.operations.quarantine_review import ANSWERS
from hubflow.registry import load_registry
from hubflow_plugins.operators.streaming_job import StreamingJobOperator


def review_params() -> dict[str, Param]:
    """The answer's form fields, beside the three options."""
    return {
        "reason": Param(
            None,
            type=["null", "string"],
            title="Reason",
            description="why (recorded with the takeover of the quarantine hold and in the audit trail)",
        ),
        "rewind_to_enqueued_time": Param(
            None,
            type=["null", "string"],
            title="Rewind to enqueued time",
            description="Rewind only: ISO-8601 time, e.g. 2026-11-22T10:00:00Z (every partition)",
        ),
    }


class QuarantineQuestionOperator(HITLOperator):
    """Ask on-call what to do with the quarantined job ``job_name`` (Required Actions): Resume,
    Rewind or Keep held, with a reason. The question names the hold (who, when, why) and the driver
    log, as found when the task runs; a job no longer quarantined (someone acted already) is not
    asked about: the task and the answer skip."""

    ui_color = "#ffd27f"

    def __init__(self, *, job_name: str, **kwargs: Any) -> None:
        kwargs.setdefault("subject", f"Job {job_name} is quarantined")
        super().__init__(options=list(ANSWERS), multiple=False, params=review_params(), **kwargs)
        self.job_name = job_name

    def execute(self, context: Any) -> Any:
        from hubflow.operations.job_control import JobControl
        from hubflow.operations.quarantine_review import quarantine_hold, question_body, question_subject
        from hubflow_plugins.hooks.azure_storage import use_job_storage

        job = use_job_storage(load_registry().job(self.job_name))
        control = JobControl(job.name, job.paths.status_dir, heartbeat_timeout=job.heartbeat_timeout)
        hold = quarantine_hold(control.folder.hold())
        if hold is None:
            raise AirflowSkipException(f"job {job.name} is not quarantined (any more): nothing to ask")
        self.subject = question_subject(job)
        self.body = question_body(job, hold, str(control.folder.path("driver.log")))
        return super().execute(context)


class QuarantineAnswerOperator(StreamingJobOperator):
    """Carry out the answer of ``question_task_id`` on the job: Resume = on-call ``start`` with force,
    Rewind = ``rewind`` with force (to the answer's enqueued time), Keep held = nothing done, the
    decision recorded in the audit trail. Every one runs under the name of the person who answered
    (HITL's ``responded_by_user``), not the run's, with source ``airflow``."""

    def __init__(self, *, job_name: str, question_task_id: str, **kwargs: Any) -> None:
        super().__init__(job_name=job_name, action="start", **kwargs)
        self.question_task_id = question_task_id
        self.responder = ""

    def execute(self, context: Any) -> Any:
        from hubflow.operations.oncall import keep_held
        from hubflow.operations.quarantine_review import ANSWER_ACTIONS, KEEP_HELD
        from hubflow_plugins.hooks.azure_storage import use_job_storage

        answer = context["ti"].xcom_pull(task_ids=self.question_task_id) or {}
        chosen = list(answer.get("chosen_options") or [])
        user = answer.get("responded_by_user") or {}
        name = user.get("name") or user.get("id")
        if len(chosen) != 1 or not name:
            raise AirflowFailException(f"no answer from a person to act on: {answer!r}")
        option, given = chosen[0], answer.get("params_input") or {}
        self.responder = f"{name} (run {context['run_id']})"
        reason = (given.get("reason") or "").strip() or f"{option} (quarantine review)"
        self.log.info("%s answered %s: %s", self.responder, option, reason)
        if option == KEEP_HELD:
            job = use_job_storage(load_registry().job(self.job_name))
            log, warn = self.log.info, self.log.warning
            line = keep_held(job, who=self.responder, reason=reason, source="airflow", log=log, warn=warn)
            return {"job": job.name, "action": "keep held", "dry_run": False, "done": [line]}
        self.action, self.force, self.reason = ANSWER_ACTIONS[option], True, reason
        self.rewind_to_enqueued_time = given.get("rewind_to_enqueued_time") or None
        return super().execute(context)

    def _who(self, context: Any) -> str:
        """The person who answered the question (with the run), not whoever triggered the run."""
        return self.responder
