"""Fixtures of the jobs tests: an embedded Event Hubs emulator with one 4-partition hub, and a
pipelines folder for test pipeline modules."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hubflow.repository import PIPELINES_DIR_ENV

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


@pytest.fixture
def pipelines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A pipelines folder named by ``$HUBFLOW_PIPELINES_DIR``; sys.path restored, its modules forgotten."""
    folder = tmp_path / "pipelines"
    folder.mkdir()
    monkeypatch.setenv(PIPELINES_DIR_ENV, str(folder))
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield folder
    # Only the test's own pipeline modules: dropping others (pyspark_eventhubs, delta, pyspark
    # submodules first imported here) would give later tests in this process new class objects.
    for name, module in list(sys.modules.items()):
        if folder in Path(getattr(module, "__file__", None) or "/").parents:
            del sys.modules[name]
