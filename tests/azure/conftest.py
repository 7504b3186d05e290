"""Fixtures of the Azure storage tests: Azurite comes from tests/conftest.py; the Spark file streams
whose checkpoints they move onto it come from the plugins tests."""

from __future__ import annotations

from tests.plugins.conftest import file_stream

__all__ = ["file_stream"]
