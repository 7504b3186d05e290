"""Which hot loops run: the compiled ones (``_native.c``) when built, else the pure-Python ones.

The compiled functions cover only the common case and hand everything else back to the Python
code, which stays the reference: both modes give the same columns, byte for byte (the connector's
equality tests run in both). HUBFLOW_EVENTHUBS_NATIVE=0 in the environment of Spark's Python
workers selects the pure-Python loops. Runs in executor Python workers.
"""

from __future__ import annotations

import os
from types import ModuleType

# The environment variable that turns the compiled loops off ("0").
NATIVE_ENV = "HUBFLOW_EVENTHUBS_NATIVE"


def _load() -> ModuleType | None:
    if os.environ.get(NATIVE_ENV, "1") == "0":
        return None
    try:
        from . import _native
    except ImportError:
        return None
    return _native


# The compiled module, or None for the pure-Python loops (tests switch it with monkeypatch).
accel: ModuleType | None = _load()
