"""Fixtures of the plugins tests: a fresh Spark file stream per test (see :mod:`file_streams`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.plugins.file_streams import FileStream


@pytest.fixture
def file_stream(spark: Any, tmp_path: Path) -> Iterator[FileStream]:
    """A fresh :class:`FileStream` in the test's temporary folder."""
    yield FileStream(spark, tmp_path / "stream")
