"""SIGTERM to the command-line servers right after their ready lines: a clean stop, exit 0, every
time (:mod:`eventhubs_emulator.stop_signals`). The handlers are in place before the first ready line,
and they take no lock, so a signal never hangs the process (a ``threading.Event`` set from a handler
did, once in a while)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from eventhubs_emulator import EmulatorConfig
from tests.support.processes import output_after_sigterm, piped_child

#: The exit after SIGTERM: the servers' threads stop and the process returns.
EXIT_WITHIN = 30


def _stops_cleanly(command: list[str], ready: str, last_line: str | None, attempts: int = 1) -> None:
    for attempt in range(attempts):
        with piped_child(command) as process:
            assert process.stdout is not None
            lines: list[str] = []
            while not lines or not lines[-1].startswith(ready):
                lines.append(process.stdout.readline())
                assert lines[-1], f"it exited before saying {ready!r}: {lines}"
            time.sleep(attempt * 0.2)
            out = output_after_sigterm(process, EXIT_WITHIN)
        assert process.returncode == 0, f"attempt {attempt}: exit {process.returncode}"
        if last_line is not None:
            assert out.splitlines()[-1] == last_line, out


def test_the_emulator_stops_cleanly_on_sigterm_right_after_its_ready_lines(tmp_path: Path) -> None:
    config = EmulatorConfig.single_hub("src", partition_count=1).write(tmp_path / "Config.json")
    command = [sys.executable, "-m", "eventhubs_emulator", "--config", str(config), "--port", "0"]
    _stops_cleanly(command, "src: Endpoint=", "Event Hubs emulator stopped", attempts=2)


def test_the_token_issuer_stops_cleanly_on_sigterm_right_after_its_ready_lines(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "eventhubs_emulator.token_issuer", "--dir", str(tmp_path / "i")]
    _stops_cleanly(command, "Registered clients:", None)
