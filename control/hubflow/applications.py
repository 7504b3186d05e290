"""The built-in jobs (entry scripts ``jobs/<application>.py``), what a job can do, and its config model.

Every job is a pipeline (:mod:`.pipeline`): a registry entry's ``application`` names a function of
the user's as ``module:function``, or a built-in job (:data:`BUILTIN_PIPELINES`, in :mod:`.builtins`)
by its name; :func:`pipeline_reference` gives the function a name runs. What a job can do follows
from its declared sources and sinks, not from a list of names: :func:`can_backfill` and
:func:`writes_lake_tables` answer for a registry entry before its config is read (the Airflow
plugins ask when they build DAGs), ``jobs/backfill.py`` refuses with the reason a pipeline whose
config cannot backfill. Importing this module imports no job module and no Spark (DAG parsing
imports it; tests/dags/test_dags.py); :meth:`BuiltinPipeline.config_model` imports the built-in's.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hubflow.config import JobConfig

#: The separator of a reference: ``module:function`` (or ``module:Class``).
REFERENCE_SEPARATOR = ":"
#: The config model of every pipeline of the user's (``application: module:function``).
PIPELINE_CONFIG = "hubflow_jobs.pipeline.declarations:PipelineConfig"


def resolve(reference: str) -> Any:
    """The object a ``module:name`` reference names, its module imported on first use.

    The config models live with the Spark code that reads them (``hubflow_jobs``, the layer above):
    the catalogue names them and this imports them when a config is read, so importing the control
    plane imports neither the driver side nor Spark (tests/control/test_import_rules.py).
    """
    module, _, name = reference.partition(REFERENCE_SEPARATOR)
    return getattr(importlib.import_module(module), name)


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
        return resolve(f"{self.module}{REFERENCE_SEPARATOR}{self.config_class}")


#: The built-in jobs rebuilt as pipelines, by their registry name (``application: eventhubs_to_lake``).
BUILTIN_PIPELINES: dict[str, BuiltinPipeline] = {
    "eventhubs_to_lake": BuiltinPipeline(
        "hubflow_jobs.builtins.eventhubs_to_lake",
        "bronze",
        "EventHubsToLakeConfig",
        "Event Hubs -> lake (bronze table, Delta or parquet)",
    ),
    "files_to_lake": BuiltinPipeline(
        "hubflow_jobs.builtins.files_to_lake",
        "landed",
        "FilesToLakeConfig",
        "file landing -> lake (Delta or parquet), bad records quarantined",
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


def is_pipeline(application: str) -> bool:
    """Whether a registry ``application`` names a pipeline function of the user's (``module:function``)."""
    return REFERENCE_SEPARATOR in application


def pipeline_reference(application: str) -> str | None:
    """The pipeline function ``application`` runs: itself for ``module:function``, the function of a
    built-in, None for an unknown name."""
    if is_pipeline(application):
        return application
    builtin = BUILTIN_PIPELINES.get(application)
    return builtin.reference if builtin else None


def backfill_builtins() -> list[str]:
    """The built-in jobs that backfill (for messages): those reading an Event Hub, landing files or a
    Delta table into lake tables by the interval's rows."""
    return sorted(name for name in BUILTIN_PIPELINES if _backfills(name))


def can_backfill(application: str) -> bool:
    """Whether jobs of ``application`` may run backfills: the built-ins that can read an interval again,
    and pipelines of the user's (``jobs/backfill.py`` refuses, with the reason, one whose sources or
    sinks cannot)."""
    return application in backfill_builtins() or is_pipeline(application)


def _backfills(builtin: str) -> bool:
    """Whether the built-in ``builtin`` reads an Event Hub, landing files or a Delta table into lake
    rows of their interval (what a pipeline backfill reads again and replaces)."""
    legacy = getattr(BUILTIN_PIPELINES[builtin].config_model(), "LEGACY", None)
    if not getattr(legacy, "backfills", True):
        return False  # eventhubs_aggregate: a window's rows are not an interval's events
    if getattr(legacy, "sink_kind", None) == "eventhubs":
        return False  # lake_to_eventhubs: a hub takes no event back
    return getattr(legacy, "source_kind", None) in ("eventhubs", "files", "delta")


def writes_lake_tables(application: str) -> bool:
    """Whether jobs of ``application`` may write lake tables: a built-in unless its sink is an Event
    Hub, and pipelines of the user's (their sinks may be)."""
    if application in BUILTIN_PIPELINES:
        legacy = getattr(BUILTIN_PIPELINES[application].config_model(), "LEGACY", None)
        return getattr(legacy, "sink_kind", None) != "eventhubs"
    return is_pipeline(application)


def config_model(application: str) -> type[JobConfig] | None:
    """The config model of ``application``: a built-in's, ``PipelineConfig`` for ``module:function``,
    None for an unknown name (imports the built-in's module, not Spark)."""
    if is_pipeline(application):
        return resolve(PIPELINE_CONFIG)
    builtin = BUILTIN_PIPELINES.get(application)
    return builtin.config_model() if builtin else None
