"""An upgrade of a streaming job, carried out whole: check, back up, start the new version, wait for
it to be ready, and roll back when it is not. No Airflow import.

The rules are :mod:`hubflow.supervision.upgrades`'; this module is the procedure, run by the on-call
core (:mod:`hubflow.operations.oncall`) under the job's action lock whenever a start would start a
version other than the one last started (the supervisor's, or on-call's start and restart):

1. the compatibility check (``last-state``): a refusal changes nothing, the old version keeps
   running, and the refusal is recorded so the supervisor does not try the same version again;
2. the old driver is stopped and its lease waited out; the checkpoint is copied (``last-state``) or
   set aside (``stateless``, ``fresh``) into its backups folder;
3. the new version starts; it has ``ready_within`` to commit a batch (or report idle), and
   ``max_upgrade_failures`` starts; ready while idle, its death before its first batch commits is
   still a failure (:meth:`Upgrade.judge_probation`, at a later supervisor run);
4. else the rollback: the new driver is stopped, the backup is put back (a batch the new version
   planned but did not commit is kept, so the previous version runs that batch again with the same
   offsets, and an idempotent sink writes it once), and the previous version starts from its
   deployed copy; without one the job is held with an ``upgrade`` hold saying why.

supervisor.json's ``upgrade`` records each step, so a supervisor killed part-way is followed by one
that finishes the judgment (:meth:`Upgrade.resume`).
"""

from __future__ import annotations

import posixpath
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hubflow.config import SINK_CHECKPOINTS
from hubflow.operations.job_control import JobControl, JobStartError
from hubflow.registry import RegisteredJob
from hubflow.status.holds import HoldKind
from hubflow.supervision.upgrades import (
    PLAN_KEY,
    STARTING_POSITION_ENV,
    UPGRADE_KEY,
    DeployedVersion,
    PipelinePlan,
    Readiness,
    UpgradeMode,
    UpgradeOutcome,
    UpgradeRecord,
    committed_since,
    deployed_file,
    first_batch_failed,
    plan_changes,
    readiness,
    ready_by,
    refusal_text,
)
from hubflow.supervision.versions import SHORT

#: Start a version (None: the one deployed now) and wait until its driver reports running; raises
#: ``JobStartError``. ``fingerprint``: what that version is; then variables for the driver.
StartVersion = Callable[[DeployedVersion | None, dict[str, Any], dict[str, str]], str]
Log = Callable[..., None]
#: How often readiness is looked at while a new version starts.
POLL_SECONDS = 3.0
#: How much of a driver log's last line a failure's record quotes: the driver's own failure line
#: (up to 600 characters, with what changed for a state schema error) and its log prefix.
LOG_LINE_CHARS = 700


class UpgradeRefused(RuntimeError):
    """The new version cannot resume the checkpoint; nothing was changed. The message says what
    changed and the ways on."""


class UpgradeRolledBack(RuntimeError):
    """The new version was not ready and was rolled back (or the job held); the message names both
    versions and why."""


@dataclass
class Upgrade:
    """The upgrade of ``job`` to the version ``fingerprint`` (its files as deployed now)."""

    job: RegisteredJob
    control: JobControl
    fingerprint: dict[str, Any]
    start: StartVersion
    who: str
    stop_wait: timedelta
    log: Log
    warn: Log

    # Deciding ----------------------------------------------------------------------------------

    @property
    def mode(self) -> UpgradeMode:
        return UpgradeMode(self.job.upgrade_mode)

    def plan(self) -> PipelinePlan:
        """The new version's plan; a config that does not read is refused with its message."""
        from hubflow.config import ConfigError
        from hubflow.supervision.upgrades import plan_of

        try:
            return plan_of(self.job.config_path(), self.job.application)
        except ConfigError as exc:
            raise UpgradeRefused(
                f"job {self.job.name}: the new version's config does not read: {exc}"
            ) from None

    def check(self, dry_run: bool = False) -> list[str]:
        """What the upgrade would do, or :class:`UpgradeRefused` for an incompatible one (recorded in
        supervisor.json unless ``dry_run``)."""
        state = self.control.supervisor_state()
        before = _digest(state)
        after = self.fingerprint["digest"]
        plan = self.plan()
        lines = [
            f"upgrade job {self.job.name} from version {before[:SHORT]} to {after[:SHORT]} ({self.mode})"
        ]
        if not self.mode.keeps_checkpoint:
            where = (
                f"the Event Hubs sources at {self.job.upgrade_from} (upgrade_from), the others where "
                "the config says"
                if self.mode == UpgradeMode.FRESH
                else "the sources where the new config says, with empty state"
            )
            lines.append(f"{self.mode}: a new checkpoint, {where}; the old one is set aside as a backup")
            return lines
        earlier = PipelinePlan.from_dict(state.get(PLAN_KEY))
        if earlier is None:
            lines.append("no plan was recorded for the running version: the compatibility check is skipped")
            return lines
        changes = plan_changes(earlier, plan)
        if changes:
            text = refusal_text(self.job.name, before, after, changes, self.job.paths.checkpoint_location)
            if dry_run:
                raise UpgradeRefused(text)
            self._record(
                UpgradeRecord(
                    before, after, str(self.mode), _now(), _now(), outcome=UpgradeOutcome.REFUSED, text=text
                )
            )
            raise UpgradeRefused(text)
        lines.append(
            "the new version reads the same sources and writes the same sinks: it resumes the checkpoint"
        )
        return lines

    # Carrying out ------------------------------------------------------------------------------

    def run(self, alive: bool, after_check: Callable[[], list[str]] | None = None) -> list[str]:
        """Check, then ``after_check`` (an on-call start releases its hold there: a refused upgrade
        leaves the job as it was), stop the old version (``alive``), back up, start the new one and
        see it ready, or roll back (then :class:`UpgradeRolledBack`)."""
        done = self.check()
        for line in done:
            self.log("%s", line)
        if after_check is not None:
            done += after_check()
        state = self.control.supervisor_state()
        before = _digest(state)
        if alive:
            done.append(self.control.stop(self.stop_wait, log=self.log, requested_by=self.who))
            self.log("%s", done[-1])
        self._wait_lease_free()
        checkpoint = self.job.paths.checkpoint_location
        committed = _committed(self.job) if self.mode.keeps_checkpoint else None
        backup = self._back_up(checkpoint)
        done.append(
            f"checkpoint {checkpoint} {'copied' if self.mode.keeps_checkpoint else 'set aside'} to {backup}"
        )
        self.log("%s", done[-1])
        now = datetime.now(UTC)
        record = UpgradeRecord(
            before,
            self.fingerprint["digest"],
            str(self.mode),
            now.isoformat(),
            ready_by(now, self.job.ready_within_delta),
            backup=backup,
            committed_before=committed,
        )
        self._record(record)
        return done + self._see_ready(record, state.get("fingerprint"), start=True)

    def resume(self, record: UpgradeRecord, alive: bool) -> list[str]:
        """A supervisor run that finds ``record`` in progress (its starter was killed): judge it as its
        starter would have (a dead new version counts as a failure)."""
        self.log("found: an upgrade %s in progress since %s", record.versions_text(), record.started_at)
        previous = (self.control.supervisor_state().get(UPGRADE_KEY) or {}).get("previous_fingerprint")
        return self._see_ready(record, previous, start=False)

    def judge_probation(self, record: UpgradeRecord, alive: bool) -> list[str] | None:
        """A supervisor run that finds ``record`` ready while idle (:func:`on_probation`): once the new
        version committed a batch the upgrade is over; when it died before, the upgrade is judged
        again as failed once (:func:`first_batch_failed`): started again or rolled back. None when
        the job is left to the supervisor's usual rules."""
        previous = (self.control.supervisor_state().get(UPGRADE_KEY) or {}).get("previous_fingerprint")
        if committed_since(record, _committed(self.job)):
            record.first_batch_pending = False
            self._record(record, previous)
            self.log("job %s: the new version committed its first batch", self.job.name)
            return None
        if alive:
            return None
        record = first_batch_failed(record, now=datetime.now(UTC), ready_within=self.job.ready_within_delta)
        self._record(record, previous)
        self.warn("job %s: %s", self.job.name, record.history[-1])
        if self.superseded(record):
            record.failures += 1
            record.history.append(f"run {record.failures} died: {self._why_dead()}")
            self._record(record, previous)
            return self._roll_back(record, previous, self._superseded_why(record))
        return self._see_ready(record, previous, start=False)

    def superseded(self, record: UpgradeRecord) -> bool:
        """Whether another version than the one on probation is deployed now (the config changed)."""
        return record.after != self.fingerprint["digest"]

    def wait_for_probation(self, record: UpgradeRecord) -> str:
        """Record that the deployed version waits for ``record``'s probation (for the status page);
        the line that says so."""
        if record.waiting != self.fingerprint["digest"]:
            previous = (self.control.supervisor_state().get(UPGRADE_KEY) or {}).get("previous_fingerprint")
            record.waiting = self.fingerprint["digest"]
            self._record(record, previous)
        return self.waiting_text(record)

    def waiting_text(self, record: UpgradeRecord) -> str:
        """Why a version deployed while another is on probation is not started yet."""
        return (
            f"version {self.fingerprint['digest'][:SHORT]} of job {self.job.name} waits: version "
            f"{record.after[:SHORT]}, ready while idle, is on probation until it commits its first batch "
            "(then the supervisor upgrades to the new one; if it dies first, it is rolled back)"
        )

    def _superseded_why(self, record: UpgradeRecord) -> str:
        return (
            "the new version, ready while idle, died before committing its first batch, and version "
            f"{self.fingerprint['digest'][:SHORT]} is deployed since: that version is not started again; "
            "the supervisor upgrades the previous one to the deployed version next"
        )

    def preview_probation(self, record: UpgradeRecord, alive: bool) -> list[str] | None:
        """What :meth:`judge_probation` would do, said for a dry run (nothing changes); None when
        the job is left to the supervisor's usual rules."""
        if committed_since(record, _committed(self.job)):
            return None
        if alive:
            return [self.waiting_text(record)] if self.superseded(record) else None
        if self.superseded(record):
            why = self._superseded_why(record)
            return [f"would roll back job {self.job.name} {record.versions_text()}: {why}"]
        failures, limit = record.failures + 1, self.job.max_upgrade_failures
        why = (
            "the new version, ready while idle, died before committing its first batch "
            f"(failure {failures} of max_upgrade_failures {limit})"
        )
        if failures >= limit:
            return [f"would roll back job {self.job.name} {record.versions_text()}: {why}"]
        return [f"would start version {record.after[:SHORT]} of job {self.job.name} again: {why}"]

    def _see_ready(self, record: UpgradeRecord, previous: Any, *, start: bool) -> list[str]:
        done: list[str] = []
        while True:
            if start:
                try:
                    done.append(self.start(None, self.fingerprint, self._environment(record)))
                    self.log("%s", done[-1])
                except JobStartError as exc:
                    record.failures += 1
                    record.history.append(f"start {record.failures} failed: {_failure_line(exc)}")
                    self._record(record, previous)
                    self.warn(
                        "the new version failed to start (%d of %d): %s",
                        record.failures,
                        self.job.max_upgrade_failures,
                        _first_line(exc),
                    )
                    if record.failures >= self.job.max_upgrade_failures:
                        return done + self._roll_back(record, previous, f"it failed {record.failures} times")
                    continue
            start = False
            found = self._readiness(record)
            if found in (Readiness.READY, Readiness.IDLE):
                record.outcome = UpgradeOutcome.READY
                record.first_batch_pending = found == Readiness.IDLE
                record.text = (
                    f"job {self.job.name}: upgraded {record.versions_text()}; the new version is ready"
                )
                if record.first_batch_pending:
                    record.text += (
                        " while idle (nothing to read): until it commits its first batch, its death is a "
                        "failed upgrade"
                    )
                self._record(record, previous)
                done.append(record.text)
                self.log("%s", done[-1])
                return done
            if found == Readiness.LATE:
                return done + self._roll_back(
                    record, previous, f"it was not ready within {self.job.ready_within} (no batch committed)"
                )
            if not self.control.liveness().alive:
                record.failures += 1
                record.history.append(f"run {record.failures} died: {self._why_dead()}")
                self._record(record, previous)
                self.warn("the new version died (%d of %d)", record.failures, self.job.max_upgrade_failures)
                if record.failures >= self.job.max_upgrade_failures:
                    return done + self._roll_back(record, previous, f"it failed {record.failures} times")
                start = True
                continue
            time.sleep(POLL_SECONDS)

    def _environment(self, record: UpgradeRecord) -> dict[str, str]:
        """A ``fresh`` upgrade's position for the new checkpoint's Event Hubs sources."""
        if record.mode == UpgradeMode.FRESH and self.job.upgrade_from:
            return {STARTING_POSITION_ENV: self.job.upgrade_from}
        return {}

    def _readiness(self, record: UpgradeRecord) -> Readiness:
        status = self.control.folder.status() or {}
        alive = self.control.liveness().alive  # a killed driver's status.json may still say idle
        return readiness(
            record,
            now=datetime.now(UTC),
            committed=_committed(self.job),
            state=status.get("state") if alive else None,
            heartbeat=status.get("heartbeat"),
        )

    def _roll_back(self, record: UpgradeRecord, previous: Any, why: str) -> list[str]:
        """Stop the new version, put the backup back, start the previous version (or hold the job)."""
        from hubflow.checkpoints.backups import restore_checkpoint

        job, control = self.job, self.control
        done = [f"rolling back job {job.name} {record.versions_text()}: {why}"]
        self.warn("%s", done[-1])
        if control.liveness().alive:
            done.append(control.stop(self.stop_wait, log=self.log, requested_by=self.who))
        self._wait_lease_free()
        checkpoint = job.paths.checkpoint_location
        if record.backup:
            stamp = record.backup.rstrip("/").rsplit("/", 1)[-1]
            replaced = restore_checkpoint(checkpoint, stamp, log=self.log, status_dir=control.status_dir)
            done.append(f"checkpoint {checkpoint} restored from {record.backup}")
            if replaced and UpgradeMode(record.mode).keeps_checkpoint:
                kept = _keep_planned_batches(replaced, checkpoint)
                if kept:
                    done.append(
                        f"kept {', '.join(kept)}, planned by the new version and not committed: the "
                        "previous version runs each again with the same offsets, and the sink skips what "
                        "it already wrote"
                    )
            self.log("%s", done[-1])
        copy = DeployedVersion.from_dict(control.folder.read_json(deployed_file(record.before)))
        both = f"version {record.after[:SHORT]} (new) and {record.before[:SHORT]} (previous)"
        failed_start = None
        if copy is not None and isinstance(previous, dict):
            try:
                done.append(self.start(copy, previous, {}))
            except JobStartError as exc:
                failed_start = _failure_line(exc)
        if copy is None or not isinstance(previous, dict) or failed_start is not None:
            why_not = (
                f"the previous version did not start again either ({failed_start})"
                if failed_start is not None
                else "the previous version is not deployed here any more"
            )
            hold = control.folder.place_hold(
                f"upgrade {record.versions_text()} rolled back ({why}); {why_not}: deploy it (or a fix), "
                "then start the job",
                by=self.who,
                kind=HoldKind.UPGRADE,
            )
            record.outcome = UpgradeOutcome.HELD
            cannot = (
                f"did not start again ({failed_start})"
                if failed_start is not None
                else "cannot be started from here (no deployed copy)"
            )
            record.text = (
                f"job {job.name}: the upgrade {record.versions_text()} was rolled back because {why}; "
                f"{both}; the checkpoint is restored, and the previous version {cannot}, so the job is "
                f"held {hold.describe()}"
            )
        else:
            record.outcome = UpgradeOutcome.ROLLED_BACK
            record.text = (
                f"job {job.name}: the upgrade {record.versions_text()} was rolled back because {why}; "
                f"{both}; the checkpoint is restored and the previous version runs again. "
                f"What the new version did: {' | '.join(record.history) or 'no batch committed'}. Fix it and "
                "deploy again: the supervisor does not start that version again by itself"
            )
        self._record(record, previous)
        self.warn("%s", record.text)
        raise UpgradeRolledBack(record.text + "\n" + "\n".join(done))

    def _back_up(self, checkpoint: str) -> str | None:
        from hubflow.checkpoints.backups import backup_checkpoint, copy_checkpoint

        keep = copy_checkpoint if self.mode.keeps_checkpoint else backup_checkpoint
        return keep(checkpoint, log=self.log, status_dir=self.control.status_dir)

    def _wait_lease_free(self) -> None:
        from hubflow.status.lease import LeaseHeldError, wait_until_lease_free

        try:
            wait_until_lease_free(self.control.folder, self.stop_wait.total_seconds())
        except LeaseHeldError as exc:
            raise UpgradeRefused(
                f"job {self.job.name}: cannot upgrade: {exc}; the checkpoint was not touched"
            ) from None

    def _why_dead(self) -> str:
        """The dead driver's reason and the last line of its log (redacted), for the record."""
        from hubflow.redaction import redact

        reason = self.control.liveness().reason
        tail = (self.control.folder.driver_log_tail(4096) or b"").decode("utf-8", "replace").strip()
        last = [line for line in tail.splitlines() if line.strip()][-1:]
        return redact(f"{reason}; driver log: {last[0][:LOG_LINE_CHARS]}" if last else reason) or reason

    def _record(self, record: UpgradeRecord, previous: Any = None) -> None:
        state = self.control.supervisor_state()
        document = record.to_dict()
        if isinstance(previous, dict):
            document["previous_fingerprint"] = previous
        elif isinstance(state.get("fingerprint"), dict) and record.in_progress:
            document["previous_fingerprint"] = state["fingerprint"]
        state[UPGRADE_KEY] = document
        self.control.write_supervisor_state(state)


def failed_upgrade(state: dict[str, Any], digest: str) -> UpgradeRecord | None:
    """The failed upgrade to version ``digest`` that supervisor.json records, if any: the supervisor
    does not try that version again (a person does, with on-call start or restart)."""
    record = UpgradeRecord.from_dict(state.get(UPGRADE_KEY))
    if record is None or record.after != digest or not UpgradeOutcome(record.outcome).failed:
        return None
    return record


def upgrade_in_progress(state: dict[str, Any], digest: str) -> UpgradeRecord | None:
    """The upgrade to ``digest`` that supervisor.json records as in progress (its starter died)."""
    record = UpgradeRecord.from_dict(state.get(UPGRADE_KEY))
    return record if record is not None and record.after == digest and record.in_progress else None


def _digest(state: dict[str, Any]) -> str:
    fingerprint = state.get("fingerprint")
    return str(fingerprint.get("digest")) if isinstance(fingerprint, dict) else "unknown"


def _committed(job: RegisteredJob) -> int | None:
    from hubflow.checkpoints.inspector import inspect_checkpoint

    try:
        report = inspect_checkpoint(job.paths.checkpoint_location, stalled_after=job.stalled_after_delta)
    except Exception:  # an unreadable checkpoint is judged by the health check, not here
        return None
    return report.latest_commit_batch_id


def _keep_planned_batches(replaced: str, checkpoint: str) -> list[str]:
    """:func:`_keep_planned_batch` for the job's query and each further sink's query whose checkpoint
    is inside the job's (``sinks/<sink>``); returns what was kept (``<query> batch N``)."""
    from hubflow.storage.azure import url_to_fs

    fs, restored = url_to_fs(checkpoint)
    kept = []
    queries = [("", "the job's query")]
    sinks = posixpath.join(restored, SINK_CHECKPOINTS)
    if fs.isdir(sinks):
        names = sorted(posixpath.basename(p.rstrip("/")) for p in fs.ls(sinks, detail=False))
        queries += [(posixpath.join(SINK_CHECKPOINTS, name), f"sink {name}") for name in names]
    for folder, what in queries:
        batch = _keep_planned_batch(_join(replaced, folder), _join(checkpoint, folder))
        if batch is not None:
            kept.append(f"{what} batch {batch}")
    return kept


def _join(base: str, folder: str) -> str:
    return f"{base.rstrip('/')}/{folder}" if folder else base


def _keep_planned_batch(replaced: str, checkpoint: str) -> int | None:
    """Copy the newest ``offsets/N`` of the replaced checkpoint into the restored one when N is past
    the restored offsets log and uncommitted: the new version may have written batch N to the sinks,
    and the previous version must run batch N with the same offsets for the sinks to skip it.

    A file source's offset is an entry of its own log (``sources/<n>/<id>``, the files of the
    batch), written when the batch was planned: those entries are copied too, or Spark cannot run
    the batch again ("batch <id> doesn't exist")."""
    from hubflow.checkpoints.spark_logs import list_batch_ids
    from hubflow.storage.azure import url_to_fs

    fs, new = url_to_fs(replaced)
    _, restored = url_to_fs(checkpoint)
    planned = list_batch_ids(fs, posixpath.join(new, "offsets"))
    committed = list_batch_ids(fs, posixpath.join(new, "commits"))
    have = list_batch_ids(fs, posixpath.join(restored, "offsets"))
    if not planned or (committed and committed[-1] >= planned[-1]) or (have and have[-1] >= planned[-1]):
        return None
    batch = planned[-1]
    if have and batch != have[-1] + 1:
        return None
    _keep_source_log_entries(fs, new, restored)
    fs.copy(posixpath.join(new, "offsets", str(batch)), posixpath.join(restored, "offsets", str(batch)))
    return batch


def _keep_source_log_entries(fs: Any, new: str, restored: str) -> None:
    """Copy each file source log entry of ``new`` past the newest of the same log in ``restored``."""
    from hubflow.checkpoints.spark_logs import list_file_log

    sources = posixpath.join(new, "sources")
    if not fs.isdir(sources):
        return
    for path in fs.ls(sources, detail=False):
        source = posixpath.basename(path.rstrip("/"))
        if not source.isdigit():
            continue
        target = posixpath.join(restored, "sources", source)
        newest = max(list_file_log(fs, target), default=-1)
        for log_id, name in sorted(list_file_log(fs, posixpath.join(sources, source)).items()):
            if log_id > newest:
                fs.makedirs(target, exist_ok=True)
                fs.copy(posixpath.join(sources, source, name), posixpath.join(target, name))


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _failure_line(exc: BaseException) -> str:
    """A failed start's first line and the last line of the log tail it quotes, redacted."""
    from hubflow.redaction import redact

    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    text = lines[0] if lines else type(exc).__name__
    if len(lines) > 1:
        text += f"; driver log: {lines[-1][:LOG_LINE_CHARS]}"
    return redact(text) or text


def _now() -> str:
    return datetime.now(UTC).isoformat()


def materialized(copy: DeployedVersion) -> tuple[Path, Path | None]:
    """The deployed copy written to its local folder (``<tmp>/hubflow-version-<version>/``, the same for
    every start of that version, so starts leave nothing behind), for a launcher."""
    return copy.materialize(Path(tempfile.gettempdir()) / f"hubflow-version-{copy.digest[:SHORT]}")
