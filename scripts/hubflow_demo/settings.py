"""Where the demo lives and what it names: its folder, the hub, the jobs and DAGs, their supervision
and each step's deadline."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
#: Where the demo keeps everything (HUBFLOW_DEMO_HOME overrides it, e.g. for the demo's own test).
DEMO = Path(os.environ.get("HUBFLOW_DEMO_HOME", REPO / ".hubflow" / "demo"))
PIDS = DEMO / "pids.json"
BIN = Path(sys.executable).parent
HUB = "telemetry"
PARTITIONS = 4
EVENTS = 2_000
#: The demo emulator's connection string to hub ``telemetry``, for pipelines of one's own that read it
#: (docs/pipelines.md); readable by its owner only, removed when the demo stops.
CONNECTION_FILE = DEMO / "eventhubs_connection"
LANDING_FILES = 5
ORDERS_PER_FILE = 40
BAD_PER_FILE = 2
BRONZE, SILVER, ORDERS = "telemetry_bronze", "telemetry_silver", "landing_orders"
SUPERVISOR = f"{BRONZE}__supervisor"
SILVER_DAG, ORDERS_DAG = f"{SILVER}__available_now", f"{ORDERS}__available_now"
#: The Airflow connection the supervisor's Slack notifier posts alerts through (to the demo's receiver).
ALERTS_CONN = "demo_alerts"
#: The bronze job's supervision: a tight policy, for the demo only (the defaults are 5 minutes,
#: 30 s, 30 min, 10 min). The demo kills the driver once, within ``healthy_after`` of its first
#: start, so the next start is ``restart_backoff`` after the first; the pause after that second
#: start is ``max_restart_backoff``, its ceiling: a restart loop, alerted at the next run.
SUPERVISION = {
    "supervise_every": "15 seconds",
    "restart_backoff": "1 minute",
    "max_restart_backoff": "2 minutes",
    "healthy_after": "3 minutes",
}
#: How long each step may take before the demo gives up, in seconds (a busy 2-core machine needs
#: most of these only when something is wrong).
DEADLINES = {
    "airflow": 300,
    "dags": 120,
    "bronze started": 180,
    "bronze landed": 240,
    "supervisor saw the kill": 120,
    "restart": 180,
    "alert": 120,
    "silver": 300,
    "orders": 300,
}
