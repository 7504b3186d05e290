"""What an upgrade of a streaming job is: its mode, the compatibility check, the deployed copy of a
version, the record of an upgrade in progress and its readiness. Airflow-free, no Spark.

A job's version changes when what it runs changes (:mod:`hubflow.supervision.versions`). The
registry's ``upgrade_mode`` says what the new version starts from (:class:`UpgradeMode`):

* ``last-state`` (the default): the checkpoint, whole: source positions and state. Before the new
  version starts, its :class:`PipelinePlan` (the sources it reads and the sinks it writes, from its
  config) must match the running version's: :func:`plan_changes` names each difference, and any
  refuses the upgrade. Spark checks the state schema itself, when the new version first plans a
  batch on the checkpoint's state: a mismatch fails that start, and the rollback undoes it.
* ``stateless`` (Flink's): a new checkpoint; the sources start where their config says (as a first
  start would), with empty state. No check: nothing is resumed.
* ``fresh``: a new checkpoint too, meant for a change ``last-state`` refuses, from the position the
  user gives in the registry's ``upgrade_from`` (``earliest``, ``latest`` or an ISO-8601 enqueued
  time): the Event Hubs sources of the new version's first start begin there
  (:data:`STARTING_POSITION_ENV`); other sources start where their config says.

Either way the old checkpoint is kept as a backup first (copied for ``last-state``, set aside for the
others), and the new version must be *ready* (:func:`readiness`) within ``ready_within``: a batch
committed since it started, or reporting idle with nothing to read. A version that fails
``max_upgrade_failures`` times first, or is not ready in time, is rolled back
(:mod:`hubflow.operations.upgrade`): the backup is put back and the previous version starts from its
deployed copy (:class:`DeployedVersion`, kept in the status folder at each start).

Ready while idle is ready on probation (:attr:`UpgradeRecord.first_batch_pending`): Spark checks a
state schema only when it plans a batch, so a version with nothing to read has proven nothing yet.
Until it commits its first batch, a death is a failure of the upgrade, judged again
(:func:`first_batch_failed`), like Flink's operator, which rolls back a new spec that never becomes
stable instead of restarting it by the job's restart strategy.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

from hubflow.supervision.versions import SHORT, versions
from hubflow.utc_times import utc_time

#: supervisor.json's keys: the running version's plan, and the upgrade in progress (or the last one).
PLAN_KEY, UPGRADE_KEY = "plan", "upgrade"
#: The status folder file of a deployed version (``{short}``: its short digest).
DEPLOYED_FILE = "version-{short}.json"
#: The driver's environment variable that gives its Event Hubs sources the position a ``fresh``
#: upgrade starts from (the registry's ``upgrade_from``); read by ``hubflow_jobs``. Spark uses a
#: starting position only for a query without a checkpoint, so it changes nothing elsewhere.
STARTING_POSITION_ENV = "HUBFLOW_STARTING_POSITION"
#: The named positions of ``upgrade_from`` (besides an enqueued time).
NAMED_POSITIONS = ("earliest", "latest")


class UpgradeMode(StrEnum):
    """The registry's ``upgrade_mode``: what a new version of a job starts from."""

    LAST_STATE = "last-state"
    STATELESS = "stateless"
    FRESH = "fresh"

    @property
    def keeps_checkpoint(self) -> bool:
        """``last-state`` resumes the checkpoint (so it is copied, and checked); the others start a new
        one (the old one is set aside)."""
        return self == UpgradeMode.LAST_STATE


class UpgradeOutcome(StrEnum):
    """How an upgrade ended (supervisor.json ``upgrade.outcome``); the alert's evidence."""

    IN_PROGRESS = "in-progress"
    READY = "ready"
    REFUSED = "refused"
    ROLLED_BACK = "rolled-back"
    HELD = "held"  # rolled back, but the previous version is not deployed: the job is held

    @property
    def failed(self) -> bool:
        return self in (UpgradeOutcome.REFUSED, UpgradeOutcome.ROLLED_BACK, UpgradeOutcome.HELD)


def parse_upgrade_from(text: str) -> str | datetime:
    """``earliest`` or ``latest``, or the enqueued time ``text`` names (ISO-8601 with a time zone, or
    UTC). Raises ValueError saying what is accepted."""
    value = text.strip()
    if value in NAMED_POSITIONS:
        return value
    when = utc_time(value)
    if when is None:
        raise ValueError(
            f"{text!r} is not a position: write earliest, latest or an ISO-8601 enqueued time such as "
            "2026-11-28T06:00:00Z"
        )
    return when


# The compatibility check ------------------------------------------------------------------------


@dataclass(frozen=True)
class PipelinePlan:
    """What a version reads and writes: each source's kind, each sink's kind and where it writes."""

    sources: dict[str, str]
    sinks: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, document: Any) -> PipelinePlan | None:
        if not isinstance(document, dict):
            return None
        sources, sinks = document.get("sources"), document.get("sinks")
        if not isinstance(sources, dict) or not isinstance(sinks, dict):
            return None
        return cls({str(k): str(v) for k, v in sources.items()}, {str(k): str(v) for k, v in sinks.items()})


def plan_of(config_path: Path, application: str) -> PipelinePlan:
    """The plan of the config at ``config_path`` (read with the application's config model, without
    the checks of the driver's machine). Raises ``ConfigError`` naming what is wrong."""
    from hubflow.applications import config_model
    from hubflow.config import ConfigError, load_config

    model = config_model(application)
    if model is None:
        raise ConfigError(f"unknown application {application!r}: no config model to read its plan")
    config = load_config(config_path, model, check_environment=False)
    sources = {name: str(source.kind) for name, source in getattr(config, "sources", {}).items()}
    sinks = {name: _sink_target(sink) for name, sink in getattr(config, "sinks", {}).items()}
    return PipelinePlan(sources, sinks)


def _sink_target(sink: Any) -> str:
    """``delta /lake/silver`` (a lake sink: its kind and table), else its kind."""
    path = getattr(sink, "output_path", None)
    return f"{sink.kind} {path}" if path else str(sink.kind)


def plan_changes(before: PipelinePlan, after: PipelinePlan) -> list[str]:
    """Each difference that keeps ``after`` from resuming ``before``'s checkpoint, as a phrase; ``[]``
    when it can. Sources are matched by the checkpoint's order (Spark numbers them), so a source
    added, removed or renamed changes what the checkpoint's offsets mean; a sink's query is its
    checkpoint, so a sink added, removed or moved does too."""
    changes = []
    if list(before.sources) != list(after.sources):
        changes.append(f"sources {_names(before.sources)} -> {_names(after.sources)}")
    for name in before.sources.keys() & after.sources.keys():
        if before.sources[name] != after.sources[name]:
            changes.append(f"source {name}: kind {before.sources[name]} -> {after.sources[name]}")
    for name in before.sinks:
        if name not in after.sinks:
            changes.append(f"sink {name} ({before.sinks[name]}) removed")
        elif before.sinks[name] != after.sinks[name]:
            changes.append(f"sink {name}: {before.sinks[name]} -> {after.sinks[name]}")
    for name in after.sinks:
        if name not in before.sinks:
            changes.append(f"sink {name} ({after.sinks[name]}) added")
    if list(before.sinks)[:1] != list(after.sinks)[:1] and before.sinks and after.sinks:
        changes.append(f"first sink {_names(before.sinks)[0]} -> {_names(after.sinks)[0]} (the job's query)")
    return changes


def _names(named: dict[str, str]) -> list[str]:
    return list(named)


def refusal_text(job: str, before: str, after: str, changes: list[str], checkpoint: str) -> str:
    """The message of an upgrade ``last-state`` refuses: the changes and the two ways on."""
    return (
        f"job {job}: the upgrade from version {before[:SHORT]} to {after[:SHORT]} is refused: the new "
        f"version cannot resume checkpoint {checkpoint} ({'; '.join(changes)}). Nothing was stopped or "
        "changed. Either set upgrade_mode: fresh in the job's registry entry (a new checkpoint, "
        "starting where the new config's sources say; the old one is kept as a backup), or deploy "
        "the previous version again and move the job with a rewind."
    )


# The deployed copy of a version -----------------------------------------------------------------


@dataclass(frozen=True)
class DeployedVersion:
    """What it takes to start a version again after its files changed on disk: its config file's
    text and, for a ``module:function`` pipeline, its module's source (a one-file module only)."""

    digest: str
    config: str
    module: str | None = None
    module_source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, document: Any) -> DeployedVersion | None:
        if not isinstance(document, dict) or not isinstance(document.get("config"), str):
            return None
        return cls(
            str(document.get("digest") or ""),
            document["config"],
            document.get("module") if isinstance(document.get("module"), str) else None,
            document.get("module_source") if isinstance(document.get("module_source"), str) else None,
        )

    @classmethod
    def of(cls, fingerprint: dict[str, Any], config_path: Path) -> DeployedVersion | None:
        """The copy of the version ``fingerprint`` describes, read now; None when it cannot be kept
        whole (a file unreadable, a module that is a package)."""
        try:
            config = Path(config_path).read_text(encoding="utf-8")
        except OSError:
            return None
        module = fingerprint.get("module")
        if not isinstance(module, dict):
            return cls(fingerprint["digest"], config)
        path = module.get("path")
        if not path or Path(path).name == "__init__.py":
            return None
        try:
            source = Path(path).read_text(encoding="utf-8")
        except OSError:
            return None
        return cls(fingerprint["digest"], config, str(module.get("name")), source)

    def materialize(self, folder: Path) -> tuple[Path, Path | None]:
        """Write the copy under ``folder``: the config file, and the module in a pipelines folder of
        its own; returns both paths (the pipelines folder None for a built-in)."""
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / "config.yaml"
        config.write_text(self.config, encoding="utf-8")
        if self.module is None or self.module_source is None:
            return config, None
        pipelines = folder / "pipelines"
        module_file = pipelines.joinpath(*self.module.split(".")).with_suffix(".py")
        module_file.parent.mkdir(parents=True, exist_ok=True)
        module_file.write_text(self.module_source, encoding="utf-8")
        return config, pipelines


def deployed_file(digest: str) -> str:
    """The status folder file that keeps the deployed copy of version ``digest``."""
    return DEPLOYED_FILE.format(short=digest[:SHORT])


def stale_deployed_files(names: set[str], state: dict[str, Any]) -> list[str]:
    """The deployed copies in a status folder (``names``) that no rollback can need any more: all
    but those of the versions supervisor.json's ``state`` names (the current and the previous one,
    and both sides of the last upgrade). A copy is only ever started as the version a failed
    upgrade goes back to, which is always one of these."""
    current, previous = versions(state)
    record = UpgradeRecord.from_dict(state.get(UPGRADE_KEY))
    digests = [v.digest for v in (current, previous) if v is not None]
    digests += [record.before, record.after] if record is not None else []
    keep = {deployed_file(digest) for digest in digests if isinstance(digest, str) and digest}
    pattern = re.compile(re.escape(DEPLOYED_FILE).replace(re.escape("{short}"), "[0-9a-f]+") + "$")
    return sorted(name for name in names if pattern.match(name) and name not in keep)


# An upgrade in progress, and its readiness ------------------------------------------------------


@dataclass
class UpgradeRecord:
    """supervisor.json's ``upgrade``: the upgrade from version ``before`` to ``after``."""

    before: str
    after: str
    mode: str
    started_at: str
    ready_by: str
    backup: str | None = None
    #: The newest batch id committed in the checkpoint when the new version started (None: none).
    committed_before: int | None = None
    failures: int = 0
    outcome: str = UpgradeOutcome.IN_PROGRESS
    text: str = ""
    history: list[str] = field(default_factory=list)
    #: Ready while idle, no batch committed since the upgrade yet: a death is still its failure.
    first_batch_pending: bool = False
    #: A version deployed since, waiting for the probation to end (its digest).
    waiting: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, document: Any) -> UpgradeRecord | None:
        if not isinstance(document, dict):
            return None
        try:
            return cls(**{k: document[k] for k in cls.__dataclass_fields__ if k in document})
        except TypeError:
            return None

    @property
    def in_progress(self) -> bool:
        return self.outcome == UpgradeOutcome.IN_PROGRESS

    def versions_text(self) -> str:
        return f"from version {self.before[:SHORT]} to {self.after[:SHORT]}"


class Readiness(StrEnum):
    """What :func:`readiness` found of a new version."""

    READY = "ready"  # a batch committed since the upgrade
    IDLE = "idle"  # nothing to read: ready on probation until its first batch commits
    WAITING = "waiting"
    LATE = "late"  # ready_within passed without a commit: roll back


def readiness(
    record: UpgradeRecord,
    *,
    now: datetime,
    committed: int | None,
    state: str | None,
    heartbeat: str | None,
) -> Readiness:
    """Whether the new version is ready: a batch committed after ``record.committed_before`` (the
    checkpoint's newest commit ``committed``), or (``IDLE``) its driver reports ``idle`` (nothing to
    read) with a heartbeat after the upgrade started. Else late once ``ready_by`` passed, waiting
    before."""
    if committed_since(record, committed):
        return Readiness.READY
    started, beat = utc_time(record.started_at), utc_time(heartbeat) if heartbeat else None
    if state == "idle" and beat is not None and started is not None and beat > started:
        return Readiness.IDLE
    ready_by = utc_time(record.ready_by)
    if ready_by is not None and now >= ready_by:
        return Readiness.LATE
    return Readiness.WAITING


def ready_by(now: datetime, ready_within: timedelta) -> str:
    return (now + ready_within).isoformat()


def committed_since(record: UpgradeRecord, committed: int | None) -> bool:
    """Whether the checkpoint's newest commit ``committed`` is a batch the new version ran."""
    return committed is not None and (record.committed_before is None or committed > record.committed_before)


def on_probation(state: dict[str, Any], digest: str) -> UpgradeRecord | None:
    """The upgrade to version ``digest`` judged ready while idle, before its first batch committed."""
    record = UpgradeRecord.from_dict(state.get(UPGRADE_KEY))
    if record is None or record.after != digest or record.outcome != UpgradeOutcome.READY:
        return None
    return record if record.first_batch_pending else None


def first_batch_failed(record: UpgradeRecord, *, now: datetime, ready_within: timedelta) -> UpgradeRecord:
    """The upgrade on probation whose new version died before committing a batch, in progress again:
    the death is judged as a failure of the upgrade (counted by ``max_upgrade_failures``, quoted in
    the rollback's message), with a new ``ready_within`` from ``now``."""
    return UpgradeRecord(
        **{
            **record.to_dict(),
            "outcome": UpgradeOutcome.IN_PROGRESS,
            "ready_by": ready_by(now, ready_within),
            "first_batch_pending": False,
            "history": [
                *record.history,
                "ready while idle (nothing to read), then died at its first batch, before committing it",
            ],
        }
    )
