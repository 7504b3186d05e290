"""Start and stop the emulator for tests, benchmarks and the demo: the one place that does it.

Two ways, both on 127.0.0.1 and a free port unless told otherwise:

- :func:`start_emulator` — in this process, on a background thread (tests: cheap, and a test can
  inject faults through the returned :class:`~.server.Emulator`);
- :func:`start_emulator_process` — the CLI (``python -m eventhubs_emulator``) in a process of its
  own, as in the local stack (benchmarks: the emulator must not share this process's GIL with
  what is measured).

Configurations are built with :meth:`EmulatorConfig.single_hub` / :meth:`EmulatorConfig.many_hubs`
and written with :meth:`EmulatorConfig.write`; nothing here spells Config.json by hand.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .config import EmulatorConfig
from .server import Emulator

# The host and port of a hub's line the CLI prints ("hub1: Endpoint=sb://127.0.0.1:5672;...").
_ENDPOINT = re.compile(r"Endpoint=sb://([^:;/]+):(\d+)")


def start_emulator(
    hubs: dict[str, int],
    *,
    data_dir: Path | None = None,
    admin: bool = False,
    consumer_groups: list[str] | None = None,
    retention_event_count: int | None = None,
    retention_minutes: float | None = None,
) -> Emulator:
    """A running in-process emulator with ``hubs`` (``{name: partition_count}``); stop it with ``stop()``.

    ``data_dir`` keeps events on disk (a second emulator on it sees them); ``admin`` opens the admin
    API on a free port; every hub gets ``consumer_groups`` besides ``$Default``.
    """
    config = EmulatorConfig.many_hubs(
        hubs,
        consumer_groups=consumer_groups,
        retention_event_count=retention_event_count,
        retention_minutes=retention_minutes,
    )
    return Emulator(config, data_dir=data_dir, admin_port=0 if admin else None).start()


@dataclass
class EmulatorProcess:
    """The emulator CLI running in its own process, and the connection string of each hub."""

    process: subprocess.Popen
    connection_strings: dict[str, str] = field(default_factory=dict)

    def stop(self, timeout: float = 30.0) -> None:
        """Terminate the process and wait for it (killed when it does not stop within ``timeout``)."""
        self.process.terminate()
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> EmulatorProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_emulator_process(config: EmulatorConfig, workdir: Path, *, port: int = 0) -> EmulatorProcess:
    """Write ``config`` to ``workdir/Config.json``, start the CLI on ``port`` (0 = a free one), and
    return once it printed every hub's connection string (it prints them when it listens)."""
    path = config.write(workdir / "Config.json")
    proc = subprocess.Popen(
        [sys.executable, "-m", "eventhubs_emulator", "--config", str(path), "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    started = EmulatorProcess(proc)
    names = [hub.name for hub in config.hubs]
    for line in proc.stdout:
        for name in names:
            endpoint = _ENDPOINT.search(line) if line.startswith(f"{name}: ") else None
            if endpoint is not None:  # built here: the CLI prints a key of your own masked
                host, port = endpoint.group(1), int(endpoint.group(2))
                started.connection_strings[name] = config.connection_string(host, port, name)
        if len(started.connection_strings) == len(names):
            return started
    started.stop()
    raise RuntimeError(
        f"the emulator exited (code {proc.returncode}) before it printed the connection strings"
    )
