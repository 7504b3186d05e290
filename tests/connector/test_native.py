"""The compiled hot loops (``pyspark_eventhubs/_native.c``): built by the project's setup, selected
by default, and turned off by HUBFLOW_EVENTHUBS_NATIVE=0 in the workers' environment. What they
compute is checked against the pure-Python loops by the decoder's and the scan's tests, which run
in both modes (``conftest.hot_loops``)."""

from __future__ import annotations

import os
import subprocess
import sys

from pyspark_eventhubs import native

from .conftest import NATIVE_MISSING

_MODE = "from pyspark_eventhubs import native; print(native.accel is not None)"


def test_the_compiled_loops_are_built_and_selected() -> None:
    assert native.accel is not None, NATIVE_MISSING
    assert callable(native.accel.scan_laid_out) and callable(native.accel.decode_laid_out)


def test_the_environment_variable_selects_the_pure_python_loops() -> None:
    def mode(value: str) -> str:
        env = {**os.environ, native.NATIVE_ENV: value}
        done = subprocess.run(
            [sys.executable, "-c", _MODE], env=env, capture_output=True, text=True, timeout=120
        )
        return done.stdout.strip()

    assert mode("0") == "False"
    assert mode("1") == "True"
