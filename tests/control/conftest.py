"""Fixtures the control-plane tests share with the plugin tests."""

from tests.plugins.conftest import file_stream, registry  # noqa: F401
