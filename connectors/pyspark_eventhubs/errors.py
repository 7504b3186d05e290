"""Exceptions of the connector. Messages name what is wrong and what to do, never a secret."""

from __future__ import annotations


class EventHubsOptionError(ValueError):
    """A connector option is missing or invalid; the message names the option and the fix."""


class EventHubsDataLossError(RuntimeError):
    """Events the query still needed expired from the hub before they were read.

    Raised only with ``failOnDataLoss=true`` (the default). The message names the partition and
    the lost sequence-number range; set ``failOnDataLoss=false`` to skip them and continue.
    """


class EventHubsReadError(RuntimeError):
    """A task could not read exactly the range it was given (timeout, gap, wrong sequence)."""
