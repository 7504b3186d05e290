"""YAML job config, validated with pydantic before Spark starts.

Every job config has the common section (:class:`JobConfig`): ``name``, ``trigger``,
``checkpoint_root``, ``status_root``, ``spark_conf`` and ``runtime``; a job adds its own sections by
subclassing it (see :mod:`hubflow_jobs.pipeline.declarations`). :func:`load_config` turns every problem -
unknown keys, missing keys or paths, bad durations, bad numbers - into one :class:`ConfigError`
whose message names the key, e.g. ``jobs config error: source.max_files_per_trigger: must be > 0``.
The schema is documented in ``docs/jobs.md``.
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar
from urllib.parse import urlparse

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from hubflow.durations import parse_positive_duration
from hubflow.platform_secrets import refused_env_keys
from hubflow.status import LeaseTiming

JOB_NAME_PATTERN = r"^[a-z][a-z0-9_]*$"
#: The folder, inside a pipeline job's checkpoint, that holds the checkpoints of its further sinks
#: (``<checkpoint>/sinks/<sink>``; ``hubflow_jobs.pipeline.declarations``).
SINK_CHECKPOINTS = "sinks"


class ConfigError(Exception):
    """The job config cannot be used; ``str(error)`` is the one line to show the user."""


class KeyedValueError(ValueError):
    """Raised by a section's cross-field check to name the key inside the section that is wrong."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(problem)
        self.key = key


class StrictModel(BaseModel):
    """A config section: unknown keys are errors, values are not coerced between types silently."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


def _check_duration(value: str) -> str:
    parse_positive_duration(value)
    return value


class TriggerConfig(StrictModel):
    """Exactly one of ``processingTime: "30 seconds"`` (long-running micro-batches), ``availableNow:
    true`` (scheduled) or ``realTime: "5 minutes"`` (long-running, Spark's real-time mode: each batch
    runs that long, its events processed as they arrive; docs/pipelines.md, "Real-time pipelines")."""

    processing_time: str | None = Field(default=None, alias="processingTime")
    available_now: bool = Field(default=False, alias="availableNow")
    real_time: str | None = Field(default=None, alias="realTime")

    @field_validator("processing_time", "real_time")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        return None if value is None else _check_duration(value)

    @model_validator(mode="after")
    def _exactly_one(self) -> TriggerConfig:
        chosen = [self.processing_time is not None, self.available_now, self.real_time is not None]
        if sum(chosen) != 1:
            raise ValueError(
                'set exactly one of processingTime: "<duration>", availableNow: true or realTime: '
                '"<checkpoint interval>"'
            )
        return self

    @property
    def kind(self) -> str:
        """``processingTime``, ``availableNow`` or ``realTime``: the key set."""
        if self.available_now:
            return "availableNow"
        return "realTime" if self.real_time is not None else "processingTime"

    @property
    def real_time_interval(self) -> timedelta | None:
        """A real-time trigger's checkpoint interval (how long each of its batches runs), else None."""
        return parse_positive_duration(self.real_time) if self.real_time is not None else None

    def spark_kwargs(self) -> dict[str, Any]:
        """The keyword arguments for ``DataStreamWriter.trigger``.

        The interval is handed to Spark in milliseconds, a unit its interval parser always accepts
        (it rejects abbreviations such as ``ms`` that the config allows).
        """
        if self.available_now:
            return {"availableNow": True}
        key, text = (
            ("realTime", self.real_time)
            if self.real_time is not None
            else (
                "processingTime",
                self.processing_time,
            )
        )
        milliseconds = round(parse_positive_duration(text or "").total_seconds() * 1000)
        return {key: f"{milliseconds} milliseconds"}


class RuntimeConfig(StrictModel):
    """How the shared runtime supervises the query; the defaults suit most jobs.

    The lease timings must satisfy ``lease_refresh_interval < lease_fence_after < lease_duration``
    (see :mod:`hubflow.status` for why that keeps two drivers off one checkpoint).
    """

    heartbeat_interval: str = "5 seconds"
    stop_timeout: str = "10 minutes"
    poll_interval: str = "1 second"
    lease_duration: str = "60 seconds"
    lease_refresh_interval: str = "10 seconds"
    lease_fence_after: str = "40 seconds"
    #: On a cluster, how long a starting job may wait for its first executor before it fails.
    executor_wait: str = "5 minutes"
    #: How many times a run starts its query when Spark's Python worker for the source did not
    #: connect back in time (:mod:`hubflow_jobs.runtime.query_start`); 1 = never again.
    start_attempts: int = Field(default=3, ge=1, le=10)

    #: Keys of earlier versions: what to write instead.
    RENAMED: ClassVar[dict[str, str]] = {
        "stale_lock_after": (
            "renamed: the lock is a lease now; set lease_duration instead (how long a holder that "
            "stopped renewing keeps the lease; default 60 seconds, see docs/jobs.md)"
        ),
    }

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for key, message in cls.RENAMED.items():
                if key in value:
                    raise KeyedValueError(key, message)
        return value

    @field_validator(
        "heartbeat_interval",
        "stop_timeout",
        "poll_interval",
        "lease_duration",
        "lease_refresh_interval",
        "lease_fence_after",
        "executor_wait",
    )
    @classmethod
    def _duration(cls, value: str) -> str:
        return _check_duration(value)

    @model_validator(mode="after")
    def _consistent_lease(self) -> RuntimeConfig:
        try:
            self.lease_timing()
        except ValueError as exc:
            raise KeyedValueError("lease_fence_after", str(exc)) from None
        return self

    def seconds(self, field: str) -> float:
        """The value of the duration ``field`` in seconds."""
        return parse_positive_duration(getattr(self, field)).total_seconds()

    def lease_timing(self) -> LeaseTiming:
        """The lease timings in seconds."""
        return LeaseTiming(
            duration=self.seconds("lease_duration"),
            refresh_interval=self.seconds("lease_refresh_interval"),
            fence_after=self.seconds("lease_fence_after"),
        )


def values_as_text(value: Any) -> Any:
    """A mapping's values as strings (``true`` -> ``"true"``, ``4`` -> ``"4"``); other values as given.

    YAML turns 4 into an int and true into a bool, while Spark confs and data source options are
    strings; the validator of :data:`TextMap`, the type of every such mapping.
    """
    if isinstance(value, dict):
        return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in value.items()}
    return value


#: A mapping of Spark conf or data source options (``spark_conf``, ``options``): its values as text.
TextMap = Annotated[dict[str, str], BeforeValidator(values_as_text)]


class JobConfig(StrictModel):
    """The common section every job config has."""

    name: str = Field(pattern=JOB_NAME_PATTERN)
    trigger: TriggerConfig
    checkpoint_root: str = Field(min_length=1)
    status_root: str = Field(min_length=1)
    spark_conf: TextMap = Field(default_factory=dict)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)

    def extra_spark_conf(self) -> dict[str, str]:
        """Spark conf a job needs before its session starts (static settings); ``spark_conf`` wins."""
        return {}

    def delta_tables(self) -> list[str]:
        """The Delta tables the job writes, which the cleanup DAG compacts and vacuums (none here)."""
        return []

    def delta_table_writers(self) -> list[tuple[str, str]]:
        """``(table, checkpoint of the query that writes it)`` for each of :meth:`delta_tables`.

        The job's own query writes them all unless a job says otherwise; the checkpoint inspector
        and the status page put a table's version beside that query's last commit.
        """
        return [(table, self.checkpoint_location) for table in self.delta_tables()]

    def parquet_outputs(self) -> list[str]:
        """The parquet tables the job writes through Spark's file sink (each with its
        ``_spark_metadata`` log), which Airflow announces as assets (none here)."""
        return []

    def file_landing(self) -> tuple[str, str | None] | None:
        """``(path, archive_dir)`` of the folder the job's ``source`` reads, None when it reads none."""
        path = getattr(getattr(self, "source", None), "path", None)
        return None if path is None else (path, getattr(self.source, "archive_dir", None))

    @property
    def checkpoint_location(self) -> str:
        """``<checkpoint_root>/<name>``: the folder Spark owns."""
        return join_path(self.checkpoint_root, self.name)

    @property
    def status_dir(self) -> str:
        """``<status_root>/<name>``: the job's status folder (:mod:`hubflow.status`)."""
        return join_path(self.status_root, self.name)


def join_path(root: str, *parts: str) -> str:
    """Join a local path or URL (``abfss://...``) with more parts using ``/``."""
    return "/".join([root.rstrip("/"), *(p.strip("/") for p in parts)])


def is_local(path: str) -> bool:
    """True for plain paths and ``file:`` URLs, which we can check before Spark starts."""
    return urlparse(path).scheme in ("", "file")


def checks_environment(info: ValidationInfo) -> bool:
    """Whether this validation checks the job's machine (see :func:`load_config`); yes by default."""
    return bool((info.context or {}).get(_CHECK_ENVIRONMENT, True))


def existing_local_folder(path: str, what: str, info: ValidationInfo) -> str:
    """``path`` unchanged; when it is local, it must be a folder that exists (checked before Spark starts).

    A remote folder (``abfss://``) is checked by Spark itself, with the storage access the job gets.
    """
    if checks_environment(info) and is_local(path) and not local_path(path).is_dir():
        raise ValueError(f"{what} {path} does not exist; create it or fix the path")
    return path


def local_path(path: str) -> Path:
    """A local path or ``file:`` URL as a :class:`Path`."""
    return Path(urlparse(path).path if path.startswith("file:") else path)


def declared_column_names(ddl: str) -> list[str]:
    """The top-level column names of a DDL schema such as ``"id BIGINT, tags ARRAY<STRING>"``.

    Only the names are read (types are left to Spark), so required columns can be checked before
    Spark starts.
    """
    names, depth, current = [], 0, ""
    for char in ddl + ",":
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        if char == "," and depth == 0:
            field = current.strip()
            if field:
                match = re.match(r"^`([^`]+)`|^(\S+)", field)
                names.append((match.group(1) or match.group(2)) if match else field)
            current = ""
        else:
            current += char
    return names


#: The validation context key of :func:`load_config`'s ``check_environment``.
_CHECK_ENVIRONMENT = "check_environment"

ConfigT = TypeVar("ConfigT", bound=JobConfig)


def load_config(
    path: str | os.PathLike[str], model: type[ConfigT], *, check_environment: bool = True
) -> ConfigT:
    """Read the YAML file at ``path`` and validate it as ``model``.

    Raises :class:`ConfigError` with one line naming every key that is wrong. ``check_environment``
    False skips the checks of the machine the job runs on (its environment variables, its local
    folders and tables), for a reader elsewhere: Airflow reads a job's paths on its workers, where
    the driver's secret variable is not set and the lake may not be mounted.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"jobs config error: cannot read config file {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"jobs config error: {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"jobs config error: {path} must hold a mapping of keys (name, trigger, ...)")
    refused = refused_env_keys(data)
    if refused:
        raise ConfigError("jobs config error: " + "; ".join(refused))
    try:
        return model.model_validate(data, context={_CHECK_ENVIRONMENT: check_environment})
    except ValidationError as exc:
        raise ConfigError("jobs config error: " + "; ".join(_describe(e) for e in exc.errors())) from None


def _describe(error: Any) -> str:
    """One ``key: problem`` phrase for a pydantic error."""
    parts = [str(part) for part in error["loc"]]
    kind, ctx = error["type"], error.get("ctx", {})
    if isinstance(ctx.get("error"), KeyedValueError):
        parts.append(ctx["error"].key)
    key = ".".join(parts) or "(top level)"
    if kind == "missing":
        problem = "is required"
    elif kind == "extra_forbidden":
        problem = "unknown key"
    elif kind == "greater_than":
        problem = f"must be > {ctx.get('gt')}"
    elif kind == "greater_than_equal":
        problem = f"must be >= {ctx.get('ge')}"
    elif kind == "string_pattern_mismatch":
        problem = f"{error['input']!r} must match {ctx.get('pattern')}"
    elif kind == "string_too_short":
        problem = "must not be empty"
    elif kind == "value_error":
        problem = str(ctx.get("error", error["msg"]))
    elif kind == "literal_error":
        problem = f"{error['input']!r} is not one of {ctx.get('expected')}"
    else:
        problem = error["msg"][:1].lower() + error["msg"][1:]
    return f"{key}: {problem}"


def archive_root(landing: str, archive_dir: str) -> str:
    """Where a landing file is archived: ``archive_dir`` + the landing folder's path.

    Spark's ``cleanSource=archive`` keeps a file's whole path under the archive folder (without
    scheme and authority), so ``<landing>/2026/11/f.json`` is archived as
    ``<archive_dir><landing path>/2026/11/f.json``; the archive task uses the same layout.
    """
    if is_local(landing):
        path = os.path.abspath(local_path(landing))
    else:
        path = "/" + landing.split("://", 1)[1].split("/", 1)[-1]
    return archive_dir.rstrip("/") + "/" + path.strip("/")
