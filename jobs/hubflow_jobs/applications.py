"""Which applications exist (entry scripts ``jobs/<application>.py``), what each can do, and its config model.

The one list everyone shares: ``jobs/backfill.py`` and ``jobs/lake_maintenance.py`` take
``--application`` and read the job's config with its model from here; the Airflow plugins import
the name lists (which applications backfill, which write lake tables) from here too.

A registry entry may also name a pipeline function ``module:function`` (:mod:`.pipeline`): its
config model is :class:`~.pipeline.declarations.PipelineConfig` (:func:`config_model`). The
built-in jobs rebuilt as pipelines (:data:`BUILTIN_PIPELINES`, in :mod:`.builtins`) keep their
names; :func:`pipeline_reference` gives the function a name runs.

The name lists import nothing. ``APPLICATIONS`` (config model, start function, summary of each
streaming application not yet a pipeline; the entry scripts run them with
``runner.run_application``) and ``CONFIG_MODELS`` (theirs and those of :data:`BUILTIN_PIPELINES`)
are built on first use (module ``__getattr__``): they import the job modules, and DAG parsing
imports this module and must stay free of them (tests/dags/test_dags.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import JobConfig

#: The built-in applications, not yet pipelines, that a backfill can run (an interval of their input
#: can be read again); pipelines are judged by their sources and sinks (:func:`can_backfill`).
BACKFILL_APPLICATIONS: tuple[str, ...] = ("files_to_lake",)
#: Built-in applications, not yet pipelines, that write lake tables (Delta unless their config says
#: ``format: parquet``).
LAKE_WRITING_APPLICATIONS: tuple[str, ...] = ("files_to_lake",)


@dataclass(frozen=True)
class BuiltinPipeline:
    """A built-in job that is a pipeline of :mod:`.builtins`: its module, function and config model."""

    module: str
    function: str
    config_class: str
    description: str

    @property
    def reference(self) -> str:
        """``module:function``, as a registry entry of the user's own would name it."""
        return f"{self.module}:{self.function}"

    def config_model(self) -> type[JobConfig]:
        """Its config model (reads the config keys of before pipelines too); imports no Spark."""
        return getattr(importlib.import_module(self.module), self.config_class)


#: The built-in jobs rebuilt as pipelines, by their registry name (``application: eventhubs_to_lake``).
BUILTIN_PIPELINES: dict[str, BuiltinPipeline] = {
    "eventhubs_to_lake": BuiltinPipeline(
        "hubflow_jobs.builtins.eventhubs_to_lake",
        "bronze",
        "EventHubsToLakeConfig",
        "Event Hubs -> lake (bronze table, Delta or parquet)",
    ),
    "bronze_to_silver": BuiltinPipeline(
        "hubflow_jobs.builtins.bronze_to_silver",
        "silver",
        "BronzeToSilverConfig",
        "bronze Delta table -> silver Delta table (parsed bodies)",
    ),
    "lake_to_eventhubs": BuiltinPipeline(
        "hubflow_jobs.builtins.lake_to_eventhubs",
        "events",
        "LakeToEventHubsConfig",
        "lake table -> Event Hubs (replay, forwarding)",
    ),
    "eventhubs_aggregate": BuiltinPipeline(
        "hubflow_jobs.builtins.eventhubs_aggregate",
        "windows",
        "EventHubsAggregateConfig",
        "Event Hubs -> windowed aggregates in the lake (Delta or parquet), bad events quarantined",
    ),
}


@dataclass(frozen=True)
class Application:
    """A streaming application: its config model, the function that starts its query, a one-line summary."""

    config_model: type[JobConfig]
    start: Callable[..., Any]
    description: str


def _applications() -> dict[str, Application]:
    """Every streaming application, by entry script name (imports the job modules, so pyspark on use)."""
    from .files_to_lake import FilesToLakeConfig, start_files_to_lake

    return {
        "files_to_lake": Application(
            FilesToLakeConfig, start_files_to_lake, "file landing -> lake (Delta or parquet)"
        ),
    }


def is_pipeline(application: str) -> bool:
    """Whether a registry ``application`` names a pipeline function of the user's (``module:function``)."""
    from .pipeline.binding import is_pipeline_reference

    return is_pipeline_reference(application)


def pipeline_reference(application: str) -> str | None:
    """The pipeline function ``application`` runs: itself for ``module:function``, the function of a
    built-in rebuilt as a pipeline, None for the other built-ins and unknown names."""
    if is_pipeline(application):
        return application
    builtin = BUILTIN_PIPELINES.get(application)
    return builtin.reference if builtin else None


def backfill_builtins() -> list[str]:
    """The built-in applications whose jobs backfill (for messages): the list above and the built-ins
    that are pipelines reading an Event Hub."""
    return sorted([*BACKFILL_APPLICATIONS, *(name for name in BUILTIN_PIPELINES if _reads_a_hub(name))])


def can_backfill(application: str) -> bool:
    """Whether jobs of ``application`` may run backfills: the built-ins that can read an interval again,
    and pipelines of the user's (``jobs/backfill.py`` refuses, with the reason, one whose sources or
    sinks cannot)."""
    return application in backfill_builtins() or is_pipeline(application)


def _reads_a_hub(builtin: str) -> bool:
    """Whether the built-in pipeline ``builtin`` reads an Event Hub (what a pipeline backfill re-reads)."""
    legacy = getattr(BUILTIN_PIPELINES[builtin].config_model(), "LEGACY", None)
    if not getattr(legacy, "backfills", True):
        return False  # eventhubs_aggregate: a window's rows are not an interval's events
    return getattr(legacy, "source_kind", None) == "eventhubs"


def writes_lake_tables(application: str) -> bool:
    """Whether jobs of ``application`` may write lake tables: the built-ins that do (a built-in
    pipeline unless its sink is an Event Hub) and pipelines of the user's (their sinks may be)."""
    if application in BUILTIN_PIPELINES:
        legacy = getattr(BUILTIN_PIPELINES[application].config_model(), "LEGACY", None)
        return getattr(legacy, "sink_kind", None) != "eventhubs"
    return application in LAKE_WRITING_APPLICATIONS or is_pipeline(application)


def config_model(application: str) -> type[JobConfig] | None:
    """The config model of ``application``: a built-in's, ``PipelineConfig`` for ``module:function``,
    None for an unknown name (imports the job modules of the built-ins, not Spark)."""
    if is_pipeline(application):
        from .pipeline.declarations import PipelineConfig

        return PipelineConfig
    return __getattr__("CONFIG_MODELS").get(application)


def __getattr__(name: str) -> Any:
    """``APPLICATIONS`` (every streaming application, by entry script name) and ``CONFIG_MODELS``
    (their config models), built on first use."""
    if name == "APPLICATIONS":
        applications = _applications()
        globals()["APPLICATIONS"] = applications
        return applications
    if name == "CONFIG_MODELS":
        models = {app_name: app.config_model for app_name, app in __getattr__("APPLICATIONS").items()}
        models |= {app_name: builtin.config_model() for app_name, builtin in BUILTIN_PIPELINES.items()}
        globals()["CONFIG_MODELS"] = models
        return models
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
