"""Fixtures of the jobs tests: an embedded Event Hubs emulator with one 4-partition hub."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .helpers import EmulatedHub


@pytest.fixture
def eventhub() -> Iterator[EmulatedHub]:
    """A fresh emulator serving hub ``hub1`` with 4 partitions, stopped after the test."""
    from eventhubs_emulator import Emulator, EmulatorConfig

    config = EmulatorConfig.single_hub("hub1", partition_count=4)
    with Emulator(config, port=0) as emulator:
        yield EmulatedHub("hub1", emulator.connection_string("hub1"), partitions=4)
    from pyspark_eventhubs.receiver_cache import RECEIVERS

    RECEIVERS.close_all()
