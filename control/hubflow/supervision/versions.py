"""Which version of a job runs, since when, and which ran before: kept in supervisor.json.

A job's *version* is the digest of what it runs (:func:`~hubflow.supervision.supervisor.job_fingerprint`:
its config file, its application and, for a pipeline, its module's source), shown by its first
:data:`SHORT` hex digits. Every start records it (:func:`advance`): a start of the same version
keeps its ``since``; a start of another version moves the current one to ``previous`` (with
``until``). The status page, ``hubflow status`` and the audit trail show them. No Airflow here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: How many hex digits of a version's digest are shown.
SHORT = 12
#: supervisor.json's keys.
VERSION_KEY, PREVIOUS_KEY = "version", "previous_version"


@dataclass(frozen=True)
class JobVersion:
    """One version of a job: its digest, since when it runs and, for a previous one, until when."""

    digest: str
    since: str | None = None
    until: str | None = None

    @property
    def short(self) -> str:
        return self.digest[:SHORT]

    def to_dict(self) -> dict[str, Any]:
        document = {"digest": self.digest, "short": self.short, "since": self.since}
        return {**document, "until": self.until} if self.until else document

    @classmethod
    def from_dict(cls, document: Any) -> JobVersion | None:
        """The version a supervisor.json entry names, or None for anything that is not one."""
        if not isinstance(document, dict) or not isinstance(document.get("digest"), str):
            return None
        since, until = document.get("since"), document.get("until")
        return cls(
            document["digest"],
            since if isinstance(since, str) else None,
            until if isinstance(until, str) else None,
        )


def versions(state: dict[str, Any]) -> tuple[JobVersion | None, JobVersion | None]:
    """The current and the previous version recorded in supervisor.json's ``state``.

    A state written before versions were kept has only the started fingerprint: that is the
    current version, since its ``started_at``."""
    current = JobVersion.from_dict(state.get(VERSION_KEY))
    if current is None:
        fingerprint = state.get("fingerprint")
        if isinstance(fingerprint, dict) and isinstance(fingerprint.get("digest"), str):
            started = state.get("started_at")
            current = JobVersion(fingerprint["digest"], started if isinstance(started, str) else None)
    return current, JobVersion.from_dict(state.get(PREVIOUS_KEY))


def advance(state: dict[str, Any], digest: str, now: str) -> dict[str, Any]:
    """supervisor.json's ``state`` once the version ``digest`` starts (or is found running) at
    ``now``: the same version keeps its ``since``; another becomes current and the one it replaces
    is kept as the previous version, until ``now``."""
    current, previous = versions(state)
    updated = dict(state)
    if current is not None and current.digest == digest:
        updated[VERSION_KEY] = current.to_dict()
        return updated
    updated[VERSION_KEY] = JobVersion(digest, now).to_dict()
    if current is not None:
        updated[PREVIOUS_KEY] = JobVersion(current.digest, current.since, now).to_dict()
    elif previous is not None:
        updated[PREVIOUS_KEY] = previous.to_dict()
    return updated


def version_text(state: dict[str, Any]) -> str | None:
    """``3f2a9c1b0d4e since T (before: 9a8b7c6d5e4f, T0 to T)``, or None when none is recorded."""
    current, previous = versions(state)
    if current is None:
        return None
    text = f"{current.short} since {current.since or 'unknown'}"
    if previous is not None:
        text += f" (before: {previous.short}, {previous.since or 'unknown'} to {previous.until or 'unknown'})"
    return text
