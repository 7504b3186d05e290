"""The Event Hubs part of a job config, shared by jobs that read from a hub and jobs that write to one.

The connection string is never in the config: ``connection_string_env`` names the environment
variable holding it (Airflow passes the connection's secret that way), so it cannot end up in a
config file, a checkpoint or a rendered template. ``options`` are extra connector options; the ones
the job derives from its own keys, and anything that looks like a secret, are refused.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from pydantic import Field, field_validator, model_validator

from .config import KeyedValueError, StrictModel, values_as_text


class EventHubConnectionConfig(StrictModel):
    """Which hub, through which environment variable, with which extra connector options."""

    #: Connector options (lower case) the job sets itself; a subclass adds its own.
    reserved_options: ClassVar[frozenset[str]] = frozenset({"eventhubs.connectionstring", "eventhubs.name"})
    #: The config section, for messages (``source`` or ``sink``).
    section: ClassVar[str] = "source"

    connection_string_env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    event_hub: str | None = Field(default=None, min_length=1)
    options: dict[str, str] = Field(default_factory=dict)

    @field_validator("options", mode="before")
    @classmethod
    def _options_as_text(cls, value: Any) -> Any:
        return values_as_text(value)

    @field_validator("connection_string_env")
    @classmethod
    def _variable_is_set(cls, value: str) -> str:
        if not os.environ.get(value):
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
        options = {**self.options, "eventhubs.connectionString": os.environ[self.connection_string_env]}
        if self.event_hub:
            options["eventhubs.name"] = self.event_hub
        return options
