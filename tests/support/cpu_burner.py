"""A load mode for the suite: busy processes beside the tests, so timing assumptions fail here first.

``pytest --cpu-burn N`` (``make test-stress`` passes the machine's core count) starts ``N`` processes
that spin at the tests' own priority for the whole session and stops them at its end. Every test
process then gets about half a core where it had one: a deadline that includes a process start, a
sleep standing in for a wait, an "it is always done by now" shows up as a failure, as on the loaded
CI machine. Started once, by the controlling pytest process (not by each pytest-xdist worker).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

#: The burner: a tight loop in a fresh interpreter, nothing else (no I/O, no memory growth).
_SPIN = "while True: pass"


def add_option(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-burn",
        type=int,
        default=0,
        metavar="N",
        help="keep N processes spinning beside the tests for the whole session (a loaded machine); 0: off",
    )


def start(config: pytest.Config) -> list[subprocess.Popen]:
    """The burners this session asked for; none in a pytest-xdist worker (its controller runs them)."""
    count = config.getoption("--cpu-burn")
    if count < 0:
        raise pytest.UsageError(f"--cpu-burn {count}: give a number of processes, 0 or more")
    if count == 0 or hasattr(config, "workerinput"):
        return []
    burners = [
        subprocess.Popen([sys.executable, "-c", _SPIN], stdin=subprocess.DEVNULL, start_new_session=True)
        for _ in range(count)
    ]
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(
            f"cpu burn: {count} spinning processes beside the tests (pids {[b.pid for b in burners]})"
        )
    return burners


def stop(burners: list[subprocess.Popen]) -> None:
    for burner in burners:
        if burner.poll() is None:
            os.killpg(burner.pid, signal.SIGKILL)
        burner.wait()
