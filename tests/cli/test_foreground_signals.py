"""``hubflow run`` and ``hubflow backfill`` in the foreground: Ctrl-C or SIGTERM reaches spark-submit
(:class:`hubflow_cli.run.Foreground`), even when the line that says so cannot be printed (the signal
landed while the main thread was printing: Python raises "reentrant call")."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from hubflow.supervision.detached_process import start_detached
from hubflow_cli.run import Foreground
from tests.support.processes import wait_until

#: A child's exit once signalled (a sleeping Python process).
EXIT_WITHIN = 30
#: A bare Python child's start on a loaded machine.
START_WITHIN = 60


def _reentrant(_text: str) -> None:
    raise RuntimeError("reentrant call inside <_io.BufferedWriter name='<stdout>'>")


def test_each_signal_reaches_the_job_even_when_its_line_cannot_be_printed(tmp_path: Path) -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    first = start_detached(sleeper, tmp_path / "first.log")
    Foreground(first, _reentrant).on_signal(signal.SIGINT, None)
    assert first.wait(EXIT_WITHIN) == -signal.SIGTERM, "the first signal asks for a graceful stop"

    said: list[str] = []
    ignores_sigterm = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
        "time.sleep(600)"
    )
    second = start_detached([sys.executable, "-c", ignores_sigterm], tmp_path / "second.log")
    wait_until(
        lambda: "ready" in (tmp_path / "second.log").read_text(), START_WITHIN, "the child ignoring SIGTERM"
    )
    foreground = Foreground(second, said.append)
    foreground.on_signal(signal.SIGTERM, None)
    foreground.on_signal(signal.SIGINT, None)
    assert second.wait(EXIT_WITHIN) == -signal.SIGKILL, "the second kills the process group"
    assert [line.split(" (")[0] for line in said] == ["stopping the job gracefully", "killing the job"]
