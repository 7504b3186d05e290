"""The registry of jobs: one YAML file (``dags/registry.yaml``) from which every DAG is generated.

A job is registered once, by name; that name is its DAG id prefix, its checkpoint folder and its
status folder. The registry says how Airflow runs the job (``streaming`` or ``scheduled``, schedule,
health thresholds); the job's own YAML config (``jobs/configs/<name>.yaml``) says what the job does.
Airflow needs a few of its locations (checkpoint and status folders, landing and archive folders,
the Delta tables it writes and their writers): :func:`read_job_paths` reads them through the job's
own config model (``hubflow.applications``, which imports no Spark), when a task runs - DAG
parsing reads the registry only. No Airflow import here.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from hubflow.alerts import ALERT_KINDS, AlertKind, AlertPolicy
from hubflow.applications import BUILTIN_PIPELINES, config_model, is_pipeline
from hubflow.config import ConfigError, archive_root, load_config
from hubflow.dag_access import AccessRoles
from hubflow.durations import parse_duration, parse_positive_duration
from hubflow.event_schedule import EventsSchedule, parse_events_schedule
from hubflow.lake_assets import AssetSchedule, parse_asset_schedule
from hubflow.repository import REPO_ROOT
from hubflow.supervision.supervisor import RestartPolicy
from hubflow.supervision.upgrades import UpgradeMode, parse_upgrade_from

#: Where the registry is read from unless HUBFLOW_REGISTRY names another file.
DEFAULT_REGISTRY = REPO_ROOT / "dags" / "registry.yaml"
#: Where job entry scripts and their configs live unless HUBFLOW_JOBS_DIR names another folder.
DEFAULT_JOBS_DIR = REPO_ROOT / "jobs"
#: Names a YAML file of per-job changes applied over the registry (see :func:`apply_overrides`).
OVERRIDES_ENV = "HUBFLOW_REGISTRY_OVERRIDES"
#: Cores a job's Spark application takes at most unless its entry sets ``cores_max``.
DEFAULT_CORES_MAX = 2


#: A real-time job is stalled when no batch committed for this many of its checkpoint intervals.
REAL_TIME_STALL_BATCHES = 3


class RegistryError(ValueError):
    """The registry or a job config it points to cannot be used; the message names the key."""


#: The shortest silence after which a job counts as dead (a heartbeat is written every few seconds;
#: a loaded machine may delay some by many).
MIN_HEARTBEAT_TIMEOUT = timedelta(minutes=2)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DeltaSinkPaths(_Strict):
    """A Delta table a job writes, and the checkpoint of the streaming query that writes it."""

    table: str
    checkpoint: str


class JobPaths(_Strict):
    """What Airflow needs to know of a job's own config."""

    name: str
    trigger: Literal["processingTime", "availableNow", "realTime"]
    #: A ``realTime`` trigger's checkpoint interval in seconds (each of its batches runs that long).
    real_time_interval_seconds: float | None = None
    checkpoint_location: str
    status_dir: str
    landing_root: str | None = None
    archive_dir: str | None = None
    delta_sinks: list[DeltaSinkPaths] = Field(default_factory=list)
    #: The parquet tables the job writes through Spark's file sink (announced as assets).
    parquet_outputs: list[str] = Field(default_factory=list)

    @property
    def delta_tables(self) -> list[str]:
        """The Delta tables the job writes (compacted and vacuumed by the cleanup DAG)."""
        return [sink.table for sink in self.delta_sinks]

    @property
    def archive_root(self) -> str | None:
        """Where Spark's ``cleanSource=archive`` puts landing files: archive_dir + the landing path.

        The archive operator uses the same layout, so a file lands at one place whoever moves it.
        """
        if not self.archive_dir or not self.landing_root:
            return None
        return archive_root(self.landing_root, self.archive_dir)


class SmtpAlerts(_Strict):
    """E-mail through the SMTP provider's ``SmtpNotifier`` (its connection: host, port, login)."""

    to: list[str] = Field(min_length=1)
    from_email: str | None = Field(default=None, description="default: the connection's from_email")
    cc: list[str] = Field(default_factory=list)
    smtp_conn_id: str = "smtp_default"

    @field_validator("to", "cc", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class SlackWebhookAlerts(_Strict):
    """Slack through the Slack provider's ``SlackWebhookNotifier`` (an incoming-webhook connection)."""

    slack_webhook_conn_id: str = "slack_default"


class CustomAlerts(_Strict):
    """Any notifier class: built with ``params`` plus ``subject`` and ``text``, then ``notify`` is called."""

    notifier: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", description="module:Class")
    params: dict[str, Any] = Field(default_factory=dict)


class AlertNotifier(_Strict):
    """One receiver of a job's alerts: exactly one of ``smtp``, ``slack_webhook``, ``custom``."""

    smtp: SmtpAlerts | None = None
    slack_webhook: SlackWebhookAlerts | None = None
    custom: CustomAlerts | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> AlertNotifier:
        given = [name for name in ("smtp", "slack_webhook", "custom") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(
                f"a notifier is exactly one of smtp, slack_webhook, custom; found {given or 'none'}"
            )
        return self

    @property
    def kind(self) -> str:
        return next(name for name in ("smtp", "slack_webhook", "custom") if getattr(self, name) is not None)


class AlertsConfig(_Strict):
    """A job's ``alerts:`` (``defaults: alerts:`` merged key by key under the job's own)."""

    enabled: bool = True
    notifiers: list[AlertNotifier] = Field(default_factory=list)
    alert_on: list[str] = Field(default_factory=lambda: list(ALERT_KINDS))
    held_longer_than: str | None = Field(default="1 day", description="a hold older than this alerts")
    max_lag_events: int | None = Field(default=None, ge=0)
    max_lag_seconds: float | None = Field(default=None, ge=0)
    status_page_url: str | None = Field(
        default=None, description="the status page's address, e.g. https://airflow.example.com/hubflow/"
    )

    @field_validator("alert_on")
    @classmethod
    def _known_kinds(cls, value: list[str]) -> list[str]:
        unknown = [kind for kind in value if kind not in ALERT_KINDS]
        if unknown:
            raise ValueError(f"unknown alert kind(s) {unknown}; known: {', '.join(ALERT_KINDS)}")
        return value

    @field_validator("held_longer_than")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is not None:
            parse_positive_duration(value)
        return value

    @field_validator("status_page_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} is not an http:// or https:// address")
        return value

    @model_validator(mode="after")
    def _someone_to_tell(self) -> AlertsConfig:
        if self.enabled and not self.notifiers:
            raise ValueError(
                "alerts are enabled but no notifier is listed under notifiers (or set enabled: false)"
            )
        return self

    def policy(self) -> AlertPolicy:
        """The core's view of this config (durations in seconds)."""
        held = parse_positive_duration(self.held_longer_than) if self.held_longer_than else None
        return AlertPolicy(
            alert_on=frozenset(self.alert_on),
            held_longer_than_seconds=held.total_seconds() if held is not None else None,
            max_lag_events=self.max_lag_events,
            max_lag_seconds=self.max_lag_seconds,
            status_page_url=self.status_page_url,
        )


def _ceiling_not_below(value: str, info: ValidationInfo, base_key: str, what: str) -> str:
    """A growing wait's ceiling (``value``) is a positive duration not shorter than its first wait
    (the entry's ``base_key``, absent when that one was refused itself)."""
    longest = parse_positive_duration(value)
    first = info.data.get(base_key)
    if first is not None and longest < parse_duration(first):
        raise ValueError(f"{value!r} is shorter than {base_key} {first!r}; it caps {what}")
    return value


class RegisteredJob(_Strict):
    """One entry of the registry."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    application: str = Field(
        description="a built-in (entry script in jobs/, e.g. files_to_lake) or a pipeline module:function"
    )
    config: str = Field(description="the job's YAML config, relative to jobs/ or absolute")
    mode: Literal["streaming", "scheduled"]
    schedule: str | None = Field(
        default=None,
        description="scheduled jobs only: cron, preset, duration, asset(<table>) (core.lake_assets) or "
        "events / events(<poll>) (core.event_arrivals)",
    )
    supervise_every: str = "5 minutes"
    stalled_after: str = "30 minutes"
    health_check: Literal["deferred", "poke"] | None = Field(
        default=None,
        description="how check_health waits: deferred (in the triggerer, holding no worker slot) or "
        "poke; default deferred for a streaming job's supervisor, poke after a scheduled run",
    )
    restart_backoff: str = Field(
        default="30 seconds", description="streaming jobs: the pause after the first automatic restart"
    )
    max_restart_backoff: str = Field(
        default="30 minutes", description="streaming jobs: the longest pause between automatic restarts"
    )
    healthy_after: str = Field(
        default="10 minutes",
        description="streaming jobs: running this long after a restart resets the backoff",
    )
    max_restarts_per_hour: int | None = Field(
        default=None,
        ge=1,
        description="streaming jobs: optional; more automatic restarts in an hour fail the supervisor",
    )
    quarantine_after: int | None = Field(
        default=None,
        ge=1,
        description="streaming jobs: optional; after this many restarts without running healthy_after, "
        "hold the job with a quarantine hold instead of restarting it",
    )
    upgrade_mode: UpgradeMode = Field(
        default=UpgradeMode.LAST_STATE,
        description="streaming jobs: what a new version starts from: last-state (the checkpoint, "
        "checked), stateless or fresh (a new checkpoint; hubflow.supervision.upgrades)",
    )
    upgrade_from: str | None = Field(
        default=None,
        description="with upgrade_mode fresh: where the new checkpoint's Event Hubs sources start: "
        "earliest, latest or an ISO-8601 enqueued time",
    )
    ready_within: str = Field(
        default="10 minutes",
        description="streaming jobs: a new version not ready (a batch committed, or idle) this long "
        "after its start is rolled back",
    )
    max_upgrade_failures: int = Field(
        default=3,
        ge=1,
        description="streaming jobs: a new version that fails this often before it is ready is rolled back",
    )
    finish_within: str | None = Field(
        default=None,
        description="scheduled jobs: a run not finished this long after it was queued pages the job's "
        "alerts.notifiers once (an Airflow deadline alert; alert kind deadline-missed)",
    )
    retries: int = Field(
        default=2, ge=0, description="scheduled jobs: retries of a failed run or backfill run (0: none)"
    )
    retry_delay: str = Field(default="30 seconds", description="the delay before the first retry")
    max_retry_delay: str = Field(default="10 minutes", description="the longest delay between retries")
    archive: bool = False
    archive_retention: str | None = None
    checkpoint_backup_retention: str = "30 days"
    vacuum_retention: str = "7 days"
    delta_checkpoint_after_commits: int = Field(default=100, ge=1)
    spark_conn_id: str = "spark_default"
    eventhubs_conn_id: str | None = None
    storage_conn_id: str | None = Field(
        default=None,
        description="the Airflow connection (type wasb or adls) of the storage account holding the job's "
        "checkpoint, status folder, landing and lake; unset: DefaultAzureCredential, or local paths",
    )
    cores_max: int = Field(
        default=DEFAULT_CORES_MAX,
        ge=1,
        description="spark.cores.max of the job's application: the most cores it takes from a cluster",
    )
    spark_conf: dict[str, str] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=list)
    alerts: AlertsConfig | None = Field(default=None, description="who is told of verdict changes")
    access: AccessRoles | None = Field(
        default=None,
        description="Airflow roles that may read (read) and trigger (act) every DAG of the job "
        "(hubflow.dag_access); unset: the auth manager's defaults",
    )

    @field_validator("spark_conf")
    @classmethod
    def _cores_max_has_its_own_key(cls, value: dict[str, str]) -> dict[str, str]:
        if "spark.cores.max" in value:
            raise ValueError("spark.cores.max is set by the key cores_max of the job's entry; move it there")
        return value

    @field_validator(
        "supervise_every",
        "stalled_after",
        "archive_retention",
        "checkpoint_backup_retention",
        "vacuum_retention",
    )
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is not None:
            parse_duration(value)
        return value

    @field_validator("schedule")
    @classmethod
    def _asset_schedule(cls, value: str | None) -> str | None:
        if value is not None:  # each raises a ValueError naming the mistake
            parse_asset_schedule(value)
            parse_events_schedule(value)
        return value

    @property
    def asset_schedule(self) -> AssetSchedule | None:
        """The tables whose changes start this job's runs (``schedule: asset(...)``), if any."""
        return parse_asset_schedule(self.schedule) if self.schedule else None

    @property
    def events_schedule(self) -> EventsSchedule | None:
        """How often the job's hub is asked for new events (``schedule: events(...)``), if so."""
        return parse_events_schedule(self.schedule) if self.schedule else None

    @field_validator("retry_delay", "restart_backoff", "healthy_after", "ready_within")
    @classmethod
    def _positive_duration(cls, value: str) -> str:
        parse_positive_duration(value)
        return value

    @field_validator("max_retry_delay")
    @classmethod
    def _not_below_retry_delay(cls, value: str, info: ValidationInfo) -> str:
        return _ceiling_not_below(value, info, "retry_delay", "the growing delay")

    @field_validator("max_restart_backoff")
    @classmethod
    def _not_below_restart_backoff(cls, value: str, info: ValidationInfo) -> str:
        return _ceiling_not_below(value, info, "restart_backoff", "the growing pause")

    @property
    def restart_policy(self) -> RestartPolicy:
        """How its supervisor restarts the job when it dies (``core.supervision``), in seconds."""
        return RestartPolicy(
            backoff_seconds=parse_duration(self.restart_backoff).total_seconds(),
            max_backoff_seconds=parse_duration(self.max_restart_backoff).total_seconds(),
            healthy_after_seconds=parse_duration(self.healthy_after).total_seconds(),
            max_restarts_per_hour=self.max_restarts_per_hour,
            quarantine_after=self.quarantine_after,
        )

    @field_validator("upgrade_from")
    @classmethod
    def _position(cls, value: str | None) -> str | None:
        if value is not None:
            parse_upgrade_from(value)
        return value

    @model_validator(mode="after")
    def _upgrade_from_with_fresh(self) -> RegisteredJob:
        fresh = self.upgrade_mode == UpgradeMode.FRESH
        if fresh and self.upgrade_from is None:
            raise ValueError(
                "upgrade_mode fresh starts a new checkpoint from a position you give: add upgrade_from "
                "(earliest, latest or an ISO-8601 enqueued time)"
            )
        if self.upgrade_from is not None and not fresh:
            raise ValueError(
                f"upgrade_from is used by upgrade_mode fresh only (this job's is {self.upgrade_mode}): "
                "remove it, or set upgrade_mode: fresh"
            )
        return self

    @field_validator("finish_within")
    @classmethod
    def _deadline_duration(cls, value: str | None) -> str | None:
        if value is not None and str(value).strip().startswith("-"):
            raise ValueError(f"{value!r} is negative; write how long a run may take, such as '45 minutes'")
        if value is not None:
            parse_positive_duration(value)
        return value

    @model_validator(mode="after")
    def _finish_within_pages_someone(self) -> RegisteredJob:
        if self.finish_within is None:
            return self
        if self.mode != "scheduled":
            raise ValueError(
                f"finish_within is for scheduled jobs, whose runs end; this job is {self.mode} (its "
                "supervisor watches it instead: stalled_after, alerts): remove finish_within"
            )
        alerts = self.alerts
        if alerts is None or not alerts.enabled:
            raise ValueError(
                "finish_within pages through the job's alerts.notifiers, and this job has no alerts "
                "enabled: add alerts: {notifiers: [...]} (docs/airflow.md), or remove finish_within"
            )
        if AlertKind.DEADLINE_MISSED not in alerts.alert_on:
            raise ValueError(
                f"finish_within is set but alerts.alert_on leaves out {AlertKind.DEADLINE_MISSED}: add it "
                "to alert_on, or remove finish_within"
            )
        return self

    @property
    def finish_within_delta(self) -> timedelta | None:
        """How long a run may take from being queued to finishing (``finish_within``), or None."""
        return parse_duration(self.finish_within) if self.finish_within else None

    @property
    def ready_within_delta(self) -> timedelta:
        """How long a new version has to be ready after an upgrade (``hubflow.supervision.upgrades``)."""
        return parse_duration(self.ready_within)

    @property
    def health_check_deferred(self) -> bool:
        """Whether ``check_health`` defers to the triggerer. A supervisor's check waits up to its
        timeout for a batch in flight, so by default it waits there, not in a worker slot; a
        scheduled run's check follows the run it judges and mostly answers at the first poke, which
        a deferral (a trigger, then a second start on a worker) would only delay."""
        if self.health_check is None:
            return self.mode == "streaming"
        return self.health_check == "deferred"

    @property
    def stalled_after_delta(self) -> timedelta:
        """No commit for this long is a stall: ``stalled_after``, and for a real-time job at least
        :data:`REAL_TIME_STALL_BATCHES` of its batches (each runs its checkpoint interval). Read at run
        time (it may read the job's config)."""
        configured = parse_duration(self.stalled_after)
        interval = self.paths.real_time_interval_seconds
        if interval is None:
            return configured
        return max(configured, timedelta(seconds=REAL_TIME_STALL_BATCHES * interval))

    @property
    def heartbeat_timeout(self) -> timedelta:
        """Silence after which the job in a live state counts as dead, for its supervisor, its health
        sensor and the status page alike: half its supervision interval, at least
        :data:`MIN_HEARTBEAT_TIMEOUT`."""
        return max(MIN_HEARTBEAT_TIMEOUT, parse_duration(self.supervise_every) / 2)

    @property
    def dag_id(self) -> str:
        """The id of the job's own DAG: ``<name>__supervisor`` (streaming) or ``<name>__available_now``."""
        return f"{self.name}__{'supervisor' if self.mode == 'streaming' else 'available_now'}"

    @property
    def oncall_dag_id(self) -> str:
        """The id of a streaming job's on-call DAG: ``<name>__oncall``."""
        return f"{self.name}__oncall"

    @property
    def is_pipeline(self) -> bool:
        """Whether the job runs a pipeline function (``application: module:function``)."""
        return is_pipeline(self.application)

    def application_path(self, jobs_dir: Path | None = None) -> Path:
        """The entry script spark-submit runs: ``jobs/<application>.py`` (``jobs/pipeline.py``)."""
        script = "pipeline" if self.is_pipeline else self.application
        return (jobs_dir or jobs_folder()) / f"{script}.py"

    def config_path(self, jobs_dir: Path | None = None) -> Path:
        path = Path(self.config)
        return path if path.is_absolute() else (jobs_dir or jobs_folder()) / path

    @cached_property
    def paths(self) -> JobPaths:
        """The job config's locations; read on first use (at run time, not at DAG parse time)."""
        return read_job_paths(self.config_path(), self.application, expected_name=self.name)


class Registry(_Strict):
    """The whole registry file."""

    jobs: list[RegisteredJob]

    def job(self, name: str) -> RegisteredJob:
        for job in self.jobs:
            if job.name == name:
                return job
        known = ", ".join(j.name for j in self.jobs) or "(none)"
        raise RegistryError(f"no job named {name!r} in the registry; registered jobs: {known}")

    def jobs_on_tables(self, tables: Iterable[str]) -> list[RegisteredJob]:
        """The jobs scheduled on any of the lake tables named ``tables`` (``schedule: asset(...)``)."""
        names = set(tables)
        return [job for job in self.jobs if job.asset_schedule and names & set(job.asset_schedule.names)]


def jobs_folder() -> Path:
    return Path(os.environ.get("HUBFLOW_JOBS_DIR", DEFAULT_JOBS_DIR))


def registry_path() -> Path:
    return Path(os.environ.get("HUBFLOW_REGISTRY", DEFAULT_REGISTRY))


def load_registry(path: Path | None = None, overrides: Path | None = None) -> Registry:
    """Read and validate the registry; errors name the file and the key.

    ``overrides`` (default: the file named by ``HUBFLOW_REGISTRY_OVERRIDES``, if set) changes keys of
    registered jobs without editing the registry, see :func:`apply_overrides`.
    """
    path = path or registry_path()
    data = _read_yaml(path, "the job registry")
    defaults = data.pop("defaults", {}) if isinstance(data, dict) else {}
    _check_default_alerts(defaults, path)
    if isinstance(data, dict) and isinstance(data.get("jobs"), list):
        data["jobs"] = [_with_defaults(defaults, entry) for entry in data["jobs"]]
    if overrides is None and os.environ.get(OVERRIDES_ENV):
        overrides = Path(os.environ[OVERRIDES_ENV])
    source = str(path)
    if overrides is not None:
        data = apply_overrides(data, overrides)
        source += f" with the overrides of {overrides}"
    try:
        registry = Registry.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(_describe(error, data) for error in exc.errors())
        raise RegistryError(f"job registry {source}: {problems}") from None
    names = [job.name for job in registry.jobs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise RegistryError(f"job registry {path}: job names must be unique; repeated: {duplicates}")
    for job in registry.jobs:
        if job.mode == "scheduled" and not job.schedule:
            raise RegistryError(
                f"job registry {path}: jobs[{job.name}].schedule is required for scheduled jobs"
            )
        if job.events_schedule is not None and not job.eventhubs_conn_id:
            raise RegistryError(
                f"job registry {path}: jobs[{job.name}].schedule {job.schedule!r} watches the job's hub, "
                f"which is named by its Airflow connection: set jobs[{job.name}].eventhubs_conn_id "
                "(e.g. eventhubs_default)"
            )
    return registry


def _with_defaults(defaults: Any, entry: Any) -> Any:
    """A job entry over the registry's ``defaults``; ``alerts`` merged key by key (the job's win)."""
    if not isinstance(entry, dict) or not isinstance(defaults, dict):
        return entry
    merged = {**defaults, **entry}
    if isinstance(defaults.get("alerts"), dict) and isinstance(entry.get("alerts"), dict):
        merged["alerts"] = {**defaults["alerts"], **entry["alerts"]}
    return merged


def _check_default_alerts(defaults: Any, path: Path) -> None:
    """Refuse a bad ``defaults.alerts`` by the key the user wrote there, not by every job's."""
    if not isinstance(defaults, dict) or "alerts" not in defaults:
        return
    try:
        AlertsConfig.model_validate(defaults["alerts"])
    except ValidationError as exc:
        # A rule of the whole section (e.g. notifiers listed) may be met by each job's own keys.
        errors = [error for error in exc.errors() if error["loc"]]
        if not errors:
            return
        problems = "; ".join(
            "defaults.alerts"
            + "".join(f".{part}" for part in error["loc"])
            + ": "
            + ("unknown key" if error["type"] == "extra_forbidden" else error["msg"])
            for error in errors
        )
        raise RegistryError(f"job registry {path}: {problems}") from None


def _read_yaml(path: Path, what: str) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise RegistryError(f"cannot read {what} {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise RegistryError(f"{what} {path} is not valid YAML: {exc}") from None


def apply_overrides(data: Any, overrides: Path) -> Any:
    """The registry ``data`` with the per-job keys of the file ``overrides`` replaced.

    The file reads ``jobs: {<name>: {<key>: <value>, ...}}``, e.g. shorter intervals for a test
    stack (``supervise_every: 1 minute``, ``schedule: 1 minute``) or another ``config``; the result
    is validated like the registry itself. A name that is not registered is an error.
    """
    changes = _read_yaml(overrides, "the registry overrides")
    jobs = changes.get("jobs") if isinstance(changes, dict) else None
    if not isinstance(jobs, dict) or set(changes) != {"jobs"}:
        raise RegistryError(
            f"registry overrides {overrides}: expected `jobs:` mapping job names to the keys to change, "
            "e.g. jobs: {landing_orders: {schedule: 1 minute}}"
        )
    entries = data.get("jobs") if isinstance(data, dict) else None
    by_name = {e.get("name"): e for e in entries or [] if isinstance(e, dict)}
    for name, keys in jobs.items():
        if name not in by_name:
            known = ", ".join(str(n) for n in by_name) or "(none)"
            raise RegistryError(
                f"registry overrides {overrides}: no job named {name!r}; registered jobs: {known}"
            )
        if not isinstance(keys, dict):
            raise RegistryError(f"registry overrides {overrides}: jobs.{name} must map keys to values")
        by_name[name].update(keys)
    return data


def _describe(error: dict[str, Any], data: Any) -> str:
    loc = list(error["loc"])
    if len(loc) >= 2 and loc[0] == "jobs" and isinstance(loc[1], int):
        try:
            loc[1] = data["jobs"][loc[1]].get("name", loc[1])
        except (KeyError, IndexError, AttributeError, TypeError):
            pass
        key = f"jobs[{loc[1]}]" + "".join(f".{part}" for part in loc[2:])
    else:
        key = ".".join(str(p) for p in loc) or "(top level)"
    message = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
    return f"{key}: {message}"


def read_job_paths(config_path: Path, application: str, expected_name: str | None = None) -> JobPaths:
    """The locations a job config declares, read through the application's config model.

    The config is validated whole, except what only the job's own machine can check (its secret
    environment variable, its local folders): see ``hubflow.config.load_config``.
    """
    model = config_model(application)
    if model is None:
        raise RegistryError(
            f"job config {config_path}: unknown application {application!r}; registered jobs run one of "
            f"{', '.join(sorted(BUILTIN_PIPELINES))}, or a pipeline function module:function"
        )
    try:
        config_path.stat()
    except OSError as exc:
        raise RegistryError(f"cannot read job config {config_path}: {exc.strerror}") from None
    try:
        config = load_config(config_path, model, check_environment=False)
    except ConfigError as exc:
        raise RegistryError(f"job config {config_path}: {exc}") from None
    if expected_name and config.name != expected_name:
        raise RegistryError(
            f"job config {config_path} has name {config.name!r} but the registry entry is {expected_name!r}: "
            "the registry name, the config name, the checkpoint folder and the status folder must agree"
        )
    landing_root, archive_dir = config.file_landing() or (None, None)
    return JobPaths(
        name=config.name,
        trigger=config.trigger.kind,
        real_time_interval_seconds=(
            config.trigger.real_time_interval.total_seconds() if config.trigger.real_time_interval else None
        ),
        checkpoint_location=config.checkpoint_location,
        status_dir=config.status_dir,
        landing_root=landing_root,
        archive_dir=archive_dir,
        delta_sinks=[
            DeltaSinkPaths(table=table, checkpoint=writer) for table, writer in config.delta_table_writers()
        ],
        parquet_outputs=config.parquet_outputs(),
    )
