"""The quarantine review: what Airflow asks on-call when the supervisor quarantines a crash-looping
job, and what each answer does. No Airflow import.

A job whose registry entry sets ``quarantine_after`` gets a review DAG (:func:`review_dag_id`),
scheduled on the asset :func:`quarantined_asset_name`; the supervisor adds an event to it (through
the alias :func:`quarantine_alias_name`) only in the run that quarantines the job. The review asks
with Airflow's human-in-the-loop operator (Required Actions) and carries the answer out through
:mod:`hubflow.operations.oncall`, under the name of the person who answered.
"""

from __future__ import annotations

from hubflow.registry import RegisteredJob
from hubflow.status.holds import HoldKind, kind_of
from hubflow.status.liveness import Marker

RESUME = "Resume"
REWIND = "Rewind"
KEEP_HELD = "Keep held"
#: The answers, in the order Required Actions shows them.
ANSWERS = (RESUME, REWIND, KEEP_HELD)
#: The on-call action each answer runs, with force (``Keep held`` runs none).
ANSWER_ACTIONS = {RESUME: "start", REWIND: "rewind"}


def review_dag_id(job: str) -> str:
    """The job's quarantine review DAG: ``<job>__quarantine_review``."""
    return f"{job}__quarantine_review"


def quarantined_asset_name(job: str) -> str:
    """The asset the review DAG is scheduled on: ``<job>__quarantined``."""
    return f"{job}__quarantined"


def quarantined_asset_uri(job: str) -> str:
    return f"hubflow-quarantine://{job}"


def quarantine_alias_name(job: str) -> str:
    """The alias the supervisor adds the quarantine's event through (an asset listed as an outlet
    would get an event at every successful supervisor run)."""
    return f"hubflow.{job}.quarantine"


def quarantine_hold(hold: Marker | None) -> Marker | None:
    """``hold`` if it is a quarantine hold, else None (nothing to review)."""
    return hold if hold is not None and kind_of(hold) == HoldKind.QUARANTINE else None


def question_subject(job: RegisteredJob) -> str:
    return f"Job {job.name} is quarantined: resume, rewind or keep it held?"


def question_body(job: RegisteredJob, hold: Marker, driver_log: str) -> str:
    """What on-call reads before answering (Markdown): the hold (who, when, why), where the driver
    log is, and what each answer does."""
    return "\n".join(
        [
            f"The supervisor stopped restarting the streaming job **{job.name}**: it crash-loops.",
            "",
            f"- held by: {hold.by or 'unknown'}",
            f"- since: {hold.at or 'unknown'}",
            f"- why: {hold.reason or 'not said'}",
            f"- driver log: `{driver_log}`",
            "",
            "Read the driver log and deploy the fix first. Then answer:",
            "",
            f"- **{RESUME}**: start the job from its checkpoint (on-call `start` with force and the reason).",
            f"- **{REWIND}**: rewind it to *Rewind to enqueued time* and start it (on-call `rewind` with "
            "force; Event Hubs jobs only).",
            f"- **{KEEP_HELD}**: leave it held; the decision goes in the job's audit trail.",
            "",
            f"The action runs under your name and is recorded in the audit trail; "
            f"{job.oncall_dag_id} remains available for anything else.",
        ]
    )


__all__ = [
    "ANSWERS",
    "ANSWER_ACTIONS",
    "KEEP_HELD",
    "RESUME",
    "REWIND",
    "quarantine_alias_name",
    "quarantine_hold",
    "quarantined_asset_name",
    "quarantined_asset_uri",
    "question_body",
    "question_subject",
    "review_dag_id",
]
