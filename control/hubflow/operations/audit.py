"""The audit trail of a job: every on-call action (and every start the supervisor makes), appended
to ``audit.jsonl`` in the job's status folder (:data:`~hubflow.status.names.AUDIT_FILE`).

One JSON object per line (:class:`AuditEntry`): when, who, which action, dry run or not, why, the
outcome (``done: ...``, ``refused: ...`` or ``failed: ...``), the hold before and after (its
``describe()`` text, or null), where the action came from (``airflow`` or ``cli``) and the version
the job was started with after it (:mod:`hubflow.supervision.versions`).

The file is one document, appended to by a conditional write: read it with its version, add the
line (keeping the newest :data:`~hubflow.status.names.AUDIT_KEPT`), replace it only if nobody
changed it since, and read again when somebody did. So two writers appending at once both land, on
local disk (the store's compare-and-swap under ``flock``) and on Azure Blob (``If-Match`` on the
ETag), without a lock of our own. Texts are redacted (:mod:`hubflow.redaction`) before they are
stored: a reason may hold a secret. No Airflow and no Spark here.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Literal

from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from hubflow.redaction import redact
from hubflow.status.documents import utc_now
from hubflow.status.names import AUDIT_FILE, AUDIT_KEPT, AUDIT_TEXT_MAX_CHARS

#: Where an action came from.
Source = Literal["airflow", "cli"]
#: How an action ended: it was carried out (or dry-run), refused before it did anything, or failed.
OUTCOMES = ("done", "refused", "failed")
#: A conditional append that lost the race this many times in a row gives up (AuditConflict).
APPEND_ATTEMPTS = 50


class AuditConflict(RuntimeError):
    """The audit file changed between our read and our write: read it again and retry."""


@dataclass(frozen=True)
class AuditEntry:
    """One action on a job, as the audit trail keeps it."""

    at: str
    by: str
    action: str
    dry_run: bool
    reason: str | None
    outcome: str
    hold_before: str | None = None
    hold_after: str | None = None
    source: Source = "airflow"
    #: The version the job was started with, after the action (short digest; None: none yet).
    version: str | None = None

    @classmethod
    def now(cls, **fields: Any) -> AuditEntry:
        """An entry stamped with the current UTC time (``at``)."""
        return cls(at=utc_now(), **fields)

    def redacted(self) -> AuditEntry:
        """This entry with every free text masked (:func:`hubflow.redaction.redact`) and shortened."""
        return AuditEntry(
            at=self.at,
            by=_text(self.by) or "unknown",
            action=_text(self.action) or "unknown",
            dry_run=bool(self.dry_run),
            reason=_text(self.reason),
            outcome=_text(self.outcome) or "unknown",
            hold_before=_text(self.hold_before),
            hold_after=_text(self.hold_after),
            source=self.source,
            version=_text(self.version),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, fields: dict[str, Any]) -> AuditEntry:
        """An entry from a stored line (unknown keys ignored, missing ones None)."""
        source = fields.get("source")
        return cls(
            at=str(fields.get("at") or ""),
            by=str(fields.get("by") or "unknown"),
            action=str(fields.get("action") or "unknown"),
            dry_run=fields.get("dry_run") is True,
            reason=_or_none(fields.get("reason")),
            outcome=str(fields.get("outcome") or "unknown"),
            hold_before=_or_none(fields.get("hold_before")),
            hold_after=_or_none(fields.get("hold_after")),
            source="cli" if source == "cli" else "airflow",
            version=_or_none(fields.get("version")),
        )

    def line(self) -> str:
        """One line for people: ``<at> <by>: <action> [dry run] because <reason> -> <outcome>``
        and the hold when there was one."""
        text = f"{self.at} {self.by}: {self.action}"
        if self.dry_run:
            text += " (dry run)"
        if self.reason:
            text += f" because {self.reason}"
        text += f" -> {self.outcome}"
        if self.hold_before != self.hold_after:
            text += f"; hold {self.hold_before or 'none'} -> {self.hold_after or 'none'}"
        elif self.hold_before:
            text += f"; held {self.hold_before}"
        if self.source != "airflow":
            text += f" [{self.source}]"
        return text


def outcome(kind: str, message: str) -> str:
    """``done: <message>`` (``kind`` one of :data:`OUTCOMES`), the message on one line."""
    if kind not in OUTCOMES:
        raise ValueError(f"unknown outcome {kind!r}; expected one of {OUTCOMES}")
    flat = " ".join(message.split())
    return f"{kind}: {flat}" if flat else kind


def append_audit(folder: Any, entry: AuditEntry, *, kept: int = AUDIT_KEPT) -> AuditEntry:
    """Append ``entry`` (redacted) to the audit file of the status folder ``folder`` (a
    :class:`~hubflow.status.StatusFolder`); the newest ``kept`` entries stay. Returns what was stored.

    Concurrent appenders all land: each append is a replace-if-unchanged of the whole file, retried
    on a conflict (:data:`APPEND_ATTEMPTS` times, with a short random pause).
    """
    stored = entry.redacted()
    line = json.dumps(stored.to_dict(), sort_keys=True, ensure_ascii=False)
    _append_line(folder.store, line, kept)
    return stored


@retry(
    retry=retry_if_exception_type(AuditConflict),
    stop=stop_after_attempt(APPEND_ATTEMPTS),
    wait=wait_random_exponential(multiplier=0.01, max=0.5),
    reraise=True,
)
def _append_line(store: Any, line: str, kept: int) -> None:
    current = store.read(AUDIT_FILE)
    lines = _lines(current.data) if current is not None else []
    lines = [*lines, line][-kept:]
    data = ("\n".join(lines) + "\n").encode("utf-8")
    if current is None:
        written = store.create(AUDIT_FILE, data)
    else:
        written = store.replace(AUDIT_FILE, data, current.version)
    if written is None:
        raise AuditConflict(f"{store.url_of(AUDIT_FILE)} changed while appending; retrying")


def read_audit(folder: Any, limit: int | None = None) -> list[AuditEntry]:
    """The newest ``limit`` entries (all when None) of the folder's audit file, oldest first; lines
    that do not parse are skipped. Empty when there is no audit file."""
    current = folder.store.read(AUDIT_FILE)
    if current is None:
        return []
    entries = []
    for line in _lines(current.data):
        try:
            fields = json.loads(line)
        except ValueError:
            continue
        if isinstance(fields, dict):
            entries.append(AuditEntry.from_dict(fields))
    if limit is not None:
        entries = entries[-limit:] if limit > 0 else []
    return entries


def _lines(data: bytes) -> list[str]:
    return [line for line in data.decode("utf-8", errors="replace").splitlines() if line.strip()]


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(redact(" ".join(str(value).split())))
    if len(text) > AUDIT_TEXT_MAX_CHARS:
        text = text[: AUDIT_TEXT_MAX_CHARS - 1] + "…"
    return text


def _or_none(value: Any) -> str | None:
    return None if value is None else str(value)
