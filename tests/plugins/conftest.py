"""Fixtures of the plugins tests: a fresh Spark file stream per test (see :mod:`file_streams`), and a
registry of two real job configs for the operators', sensor's and DAG factory's unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dags.helpers import landing_job, write_registry
from tests.plugins.file_streams import FileStream


@pytest.fixture
def file_stream(spark: Any, tmp_path: Path) -> Iterator[FileStream]:
    """A fresh :class:`FileStream` in the test's temporary folder."""
    yield FileStream(spark, tmp_path / "stream")


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``HUBFLOW_REGISTRY`` naming a registry of a streaming job ``clicks`` and a scheduled, archived job
    ``orders`` (files_to_lake configs under ``tmp_path``); no Spark connection, so nothing can start."""
    jobs = [
        landing_job(tmp_path, "clicks", streaming=True),
        landing_job(tmp_path, "orders", archive=True),
    ]
    path = write_registry(tmp_path, jobs)
    monkeypatch.setenv("HUBFLOW_REGISTRY", str(path))
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    return path
