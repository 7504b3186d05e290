"""Which applications exist (entry scripts ``jobs/<application>.py``), what each can do, and its config model.

The one list everyone shares: ``jobs/backfill.py`` and ``jobs/lake_maintenance.py`` take
``--application`` and read the job's config with its model from here; the Airflow plugins import
the name lists (which applications backfill, which write lake tables) from here too.

The name lists import nothing. ``CONFIG_MODELS`` is built on first use (module ``__getattr__``)
because the config models live beside their jobs, whose modules import pyspark, and DAG parsing
imports this module and must stay free of Spark (tests/dags/test_dags.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import JobConfig

#: The applications a backfill can run (an interval of their input can be read again).
BACKFILL_APPLICATIONS: tuple[str, ...] = ("eventhubs_to_lake", "files_to_lake")
#: Applications that write lake tables (Delta unless their config says ``format: parquet``).
LAKE_WRITING_APPLICATIONS: tuple[str, ...] = (
    "eventhubs_to_lake",
    "files_to_lake",
    "eventhubs_aggregate",
    "bronze_to_silver",
)


def _config_models() -> dict[str, type[JobConfig]]:
    """Every application's config model, by entry script name (imports the job modules, so pyspark)."""
    from .bronze_to_silver import BronzeToSilverConfig
    from .eventhubs_aggregate import EventHubsAggregateConfig
    from .eventhubs_to_lake import EventHubsToLakeConfig
    from .files_to_lake import FilesToLakeConfig
    from .lake_to_eventhubs import LakeToEventHubsConfig

    return {
        "eventhubs_to_lake": EventHubsToLakeConfig,
        "files_to_lake": FilesToLakeConfig,
        "eventhubs_aggregate": EventHubsAggregateConfig,
        "lake_to_eventhubs": LakeToEventHubsConfig,
        "bronze_to_silver": BronzeToSilverConfig,
    }


def __getattr__(name: str) -> Any:
    """``CONFIG_MODELS``: every application's config model, by entry script name (built on first use)."""
    if name == "CONFIG_MODELS":
        models = _config_models()
        globals()["CONFIG_MODELS"] = models
        return models
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
