"""The stack's start: the Event Hubs emulator and ``airflow standalone`` together (standalone
migrates its SQLite DB itself), then the emulator's health."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from datetime import UTC, datetime

from eventhubs_emulator import EmulatorConfig
from hubflow_demo.processes import start
from hubflow_demo.progress import DemoFailed, say, wait_for
from hubflow_demo.settings import BIN, DEMO


def start_stack(
    config: EmulatorConfig, amqp_port: int, admin_port: int, env: dict[str, str], ui: str
) -> tuple[subprocess.Popen, datetime]:
    """Start the emulator and Airflow, wait for the emulator; return Airflow's process and when it
    started."""
    # The emulator and Airflow start together (standalone migrates its SQLite DB itself).
    say(f"starting the Event Hubs emulator (127.0.0.1:{amqp_port}) and `airflow standalone` ({ui})")
    config.write(DEMO / "Config.json")
    command = [sys.executable, "-m", "eventhubs_emulator", "--config", str(DEMO / "Config.json")]
    emulator = start(
        "emulator", [*command, "--port", str(amqp_port), "--admin-port", str(admin_port)], dict(os.environ)
    )
    started = datetime.now(UTC)
    standalone = start("airflow", [str(BIN / "airflow"), "standalone"], env)

    def emulator_up() -> bool:
        if emulator.poll() is not None:
            raise DemoFailed(f"the emulator exited with code {emulator.returncode}")
        return urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/health", timeout=2).status == 200

    wait_for(emulator_up, "airflow", interval=0.3)
    return standalone, started
