"""The Event Hubs part of a job config, shared by jobs that read from a hub and jobs that write to one,
and the ``source:`` section of the jobs that read one.

The connection string is never in the config: ``connection_string_env`` names the environment
variable holding it (Airflow passes the connection's secret that way), so it cannot end up in a
config file, a checkpoint or a rendered template. ``options`` are extra connector options; the ones
the job derives from its own keys, and anything that looks like a secret, are refused.
"""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from hubflow.config import KeyedValueError, StrictModel, TextMap, checks_environment
from hubflow.supervision.upgrades import STARTING_POSITION_ENV, parse_upgrade_from
from pyspark_eventhubs import DEFAULT_CONSUMER_GROUP, EventHubsConnectionString, EventPosition

log = logging.getLogger(__name__)

#: The key ``eventhub_name`` had before it got the name the connection extra and Python use.
DEPRECATED_EVENTHUB_KEY = "event_hub"


class EventHubConnectionConfig(StrictModel):
    """Which hub, through which environment variable, with which extra connector options."""

    #: Connector options (lower case) the job sets itself; a subclass adds its own.
    reserved_options: ClassVar[frozenset[str]] = frozenset({"eventhubs.connectionstring", "eventhubs.name"})
    #: The config section, for messages (``source`` or ``sink``).
    section: ClassVar[str] = "source"

    connection_string_env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    eventhub_name: str | None = Field(default=None, min_length=1)
    options: TextMap = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _deprecated_event_hub_key(cls, value: Any) -> Any:
        """``event_hub`` was the key's name before ``eventhub_name``: read it, and say to rename it."""
        if not isinstance(value, dict) or DEPRECATED_EVENTHUB_KEY not in value:
            return value
        old, new = f"{cls.section}.{DEPRECATED_EVENTHUB_KEY}", f"{cls.section}.eventhub_name"
        if "eventhub_name" in value:
            raise KeyedValueError(
                DEPRECATED_EVENTHUB_KEY, f"is the deprecated name of {new}; keep only {new}"
            )
        message = f"job config: {old} is deprecated; rename it to {new}"
        log.warning("%s", message)
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        value = dict(value)
        value["eventhub_name"] = value.pop(DEPRECATED_EVENTHUB_KEY)
        return value

    @field_validator("connection_string_env")
    @classmethod
    def _variable_is_set(cls, value: str, info: ValidationInfo) -> str:
        if checks_environment(info) and not os.environ.get(value):
            raise ValueError(
                f"environment variable {value} is not set; export the Event Hubs connection string in it"
            )
        return value

    @model_validator(mode="after")
    def _no_reserved_options(self) -> EventHubConnectionConfig:
        for key in self.options:
            if key.lower() in self.reserved_options:
                raise KeyedValueError(
                    f"options.{key}",
                    f"is set by the job itself; use the {self.section} keys (see docs/jobs.md)",
                )
            if "secret" in key.lower():
                raise KeyedValueError(f"options.{key}", "secrets do not belong in the config file")
        return self

    def connection_options(self) -> dict[str, str]:
        """``options`` plus the connection string (read from the environment now) and the hub name."""
        connection_string = os.environ[self.connection_string_env]
        options = {**self.options, "eventhubs.connectionString": connection_string}
        # an Entra ID connection (no secret in it): Endpoint=sb://<namespace>/;EntityPath=<hub>, as
        # the Airflow hook hands it; the connector judges the string itself.
        if not EventHubsConnectionString.parse(connection_string, skip_malformed=True).has_key:
            options.setdefault("eventhubs.useAadAuth", "true")
        if self.eventhub_name:
            options["eventhubs.name"] = self.eventhub_name
        return options


_STARTING_POSITIONS = {
    "earliest": EventPosition.start_of_stream(),
    "latest": EventPosition.end_of_stream(),
}


def starting_position_override() -> EventPosition | None:
    """The position a ``fresh`` upgrade gives the Event Hubs sources of a new checkpoint (the driver's
    :data:`~hubflow.supervision.upgrades.STARTING_POSITION_ENV`), or None. Runs on the driver."""
    text = os.environ.get(STARTING_POSITION_ENV)
    if not text:
        return None
    position = parse_upgrade_from(text)
    if isinstance(position, str):
        return _STARTING_POSITIONS[position]
    return EventPosition.from_enqueued_time(position)


class EventHubSourceConfig(EventHubConnectionConfig):
    """``source:`` of the jobs that read a hub (eventhubs_to_lake, eventhubs_aggregate)."""

    reserved_options: ClassVar[frozenset[str]] = EventHubConnectionConfig.reserved_options | {
        "eventhubs.consumergroup",
        "eventhubs.startingposition",
        "eventhubs.maxeventspertrigger",
        "maxeventspertrigger",
    }

    consumer_group: str = Field(default=DEFAULT_CONSUMER_GROUP, min_length=1)
    starting_position: Literal["earliest", "latest"] = "earliest"
    max_events_per_trigger: int = Field(default=100_000, gt=0)

    def spark_options(self) -> dict[str, str]:
        """The options for ``format("eventhubs")``, connection string read from the environment."""
        return {
            **self.connection_options(),
            "eventhubs.consumerGroup": self.consumer_group,
            "eventhubs.startingPosition": (
                starting_position_override() or _STARTING_POSITIONS[self.starting_position]
            ).to_json(),
            "maxEventsPerTrigger": str(self.max_events_per_trigger),
        }


class EventHubSinkConfig(EventHubConnectionConfig):
    """The Event Hub a job publishes to (``sink:`` of lake_to_eventhubs, a pipeline's ``kind: eventhubs``)."""

    section: ClassVar[str] = "sink"

    def spark_options(self) -> dict[str, str]:
        """The options for ``writeStream.format("eventhubs")``, connection string from the environment."""
        return self.connection_options()
