"""The demo's scheduled runs: landing_orders on its schedule (triggered only if it did not run),
telemetry_silver by bronze's Asset, and the supervisor's runs."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from hubflow_demo.airflow_api import Api
from hubflow_demo.lake import row_count
from hubflow_demo.progress import DemoFailed, say, wait_for
from hubflow_demo.settings import BRONZE, ORDERS_DAG, SILVER, SILVER_DAG, SUPERVISOR


def ensure_orders_run(api: Api) -> None:
    """A scheduled DAG runs its last interval once unpaused; trigger it only if it did not."""
    deadline = time.monotonic() + 15
    while not api.runs(ORDERS_DAG) and time.monotonic() < deadline:
        time.sleep(1)
    if not api.runs(ORDERS_DAG):
        api.trigger(ORDERS_DAG)
        say(f"triggered {ORDERS_DAG}")


def wait_for_silver(api: Api, data: Path, sent: int) -> list[dict[str, Any]]:
    """The silver DAG's Asset-triggered runs (newest first), once one succeeded and the silver
    table has every event; a DemoFailed when one failed."""

    def silver_done() -> list[dict[str, Any]] | None:
        runs = [run for run in api.runs(SILVER_DAG) if run.get("run_type") == "asset_triggered"]
        failed = [run["dag_run_id"] for run in runs if run.get("state") == "failed"]
        if failed:
            raise DemoFailed(f"{SILVER_DAG} run(s) {failed} failed")
        succeeded = [run for run in runs if run.get("state") == "success"]
        if succeeded and row_count(data / "lake" / SILVER) >= sent:
            return runs
        return None

    silver_runs = wait_for(silver_done, "silver", interval=2)
    say(
        f"{SILVER_DAG} ran by the Asset {BRONZE} ({len(silver_runs)} asset-triggered run(s), "
        f"last {silver_runs[0]['state']}); the silver table has every event"
    )
    return silver_runs


def wait_for_orders(api: Api) -> list[str]:
    """The states of the orders DAG's runs (newest first), once its newest has finished."""

    def orders_done() -> list[str] | None:
        states = [run["state"] for run in api.runs(ORDERS_DAG)]
        return states if states and states[0] in ("success", "failed") else None

    return wait_for(orders_done, "orders", interval=2)


def supervisor_run_states(api: Api) -> Counter[str]:
    """How many of the supervisor DAG's runs are in each state."""
    return Counter(run["state"] for run in api.runs(SUPERVISOR))
