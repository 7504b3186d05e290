"""Which applications exist (entry scripts ``jobs/<application>.py``) and the config model of each.

The one list the other entry points share: ``jobs/backfill.py`` and ``jobs/lake_maintenance.py``
take ``--application`` and read the job's config with its model from here.
"""

from __future__ import annotations

from .aggregation import EventHubsAggregateConfig
from .bronze_to_silver import BronzeToSilverConfig
from .config import JobConfig
from .eventhubs_bronze import EventHubsToLakeConfig
from .file_landing import FilesToLakeConfig
from .publisher import LakeToEventHubsConfig

#: Every application's config model, by entry script name.
CONFIG_MODELS: dict[str, type[JobConfig]] = {
    "eventhubs_to_lake": EventHubsToLakeConfig,
    "files_to_lake": FilesToLakeConfig,
    "eventhubs_aggregate": EventHubsAggregateConfig,
    "lake_to_eventhubs": LakeToEventHubsConfig,
    "bronze_to_silver": BronzeToSilverConfig,
}
#: The applications a backfill can run (an interval of their input can be read again).
BACKFILL_APPLICATIONS: tuple[str, ...] = ("eventhubs_to_lake", "files_to_lake")
