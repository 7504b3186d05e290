"""The demo's summary: every table read back with delta-rs, the restarts, the alerts received, the
DAGs' last states, and where to look (status page, Airflow UI, logs)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from hubflow_demo.lake import row_count, table_rows
from hubflow_demo.progress import console
from hubflow_demo.settings import BRONZE, DEMO, LANDING_FILES, ORDERS_DAG, SILVER, SILVER_DAG, SUPERVISOR


def summary_facts(
    good: int,
    bad: int,
    sent: int,
    alerts: list[str],
    restart_times: list[datetime],
    silver_runs: list[dict[str, Any]],
) -> dict[str, Any]:
    """What the summary tells that the lake does not: the inputs, alerts, restarts, silver's runs."""
    return {
        "good": good,
        "bad": bad,
        "sent": sent,
        "alerts": list(alerts),
        "restarts": f"{len(restart_times)} (the first start, then the restart after the kill): "
        + ", ".join(t.isoformat(timespec="seconds") for t in restart_times),
        "silver_runs": ", ".join(f"{run['dag_run_id']} {run['state']}" for run in silver_runs),
    }


def summarize(data: Path, registry: Path, facts: dict[str, Any]) -> Table:
    """The summary table; the lake's Delta tables are read with delta-rs, as any non-Spark reader would."""
    from hubflow.checkpoints.inspector import inspect_checkpoint
    from hubflow.registry import load_registry

    good, bad, sent = facts["good"], facts["bad"], facts["sent"]
    table = Table(title="hubflow demo", show_lines=False)
    table.add_column("what")
    table.add_column("value", overflow="fold")
    table.add_row("landing records in", f"{good + bad} ({good} good, {bad} broken on purpose)")
    table.add_row("orders rows out", str(row_count(data / "lake" / "orders")))
    table.add_row("orders rows quarantined", str(row_count(data / "quarantine")))
    archived = list((data / "archive").rglob("*.json")) if (data / "archive").exists() else []
    table.add_row("landing files archived", f"{len(archived)} of {LANDING_FILES}")
    table.add_row("Event Hubs events in", str(sent))
    bronze = table_rows(data / "lake" / BRONZE, "partition", "sequenceNumber")
    table.add_row("telemetry rows out", f"{len(bronze)} ({len(set(bronze))} distinct events)")
    silver = table_rows(data / "lake" / SILVER, "reading")
    table.add_row("silver rows out", f"{len(silver)} ({len(set(silver))} distinct readings)")
    table.add_row("silver rows quarantined", str(row_count(data / "quarantine_silver")))
    table.add_row("bronze starts by its supervisor", facts["restarts"])
    table.add_row("alerts received", str(len(facts["alerts"])))
    for text in facts["alerts"]:
        table.add_row("  alert", escape(text.splitlines()[0] if text else "(empty)"))
    table.add_row("silver runs by its Asset", facts["silver_runs"])
    for job in load_registry(registry).jobs:
        paths = job.paths
        report = inspect_checkpoint(
            paths.checkpoint_location, stalled_after=timedelta(hours=2), delta_tables=paths.delta_tables
        )
        table.add_row(f"checkpoint {job.name}", f"{report.verdict}: {report.reason}")
        for sink in report.delta_sinks:
            name = Path(sink.table).name
            table.add_row(f"Delta table {name}", f"version {sink.version}: {sink.explanation}")
    table.add_row("lake output (Delta)", str(data / "lake"))
    return table


def print_summary(
    data: Path,
    registry: Path,
    facts: dict[str, Any],
    dag_states: tuple[str, str, Counter[str]],
    ui: str,
    status_page: str,
) -> None:
    """The summary table, the DAGs' last states (orders, silver, the supervisor's runs) and where
    to look."""
    orders_state, silver_state, supervisor_states = dag_states
    console.print(summarize(data, registry, facts))
    console.print(f"DAG {ORDERS_DAG}: {orders_state}")
    console.print(f"DAG {SILVER_DAG}: {silver_state} (run type asset_triggered)")
    console.print(
        f"DAG {SUPERVISOR}: {supervisor_states.total()} runs ("
        + ", ".join(f"{count} {state}" for state, count in sorted(supervisor_states.items()))
        + ")"
    )
    console.print(f"status page: {status_page}")
    console.print(f"Airflow UI: {ui} (no login: the demo runs with every user as admin)")
    console.print(f"logs: {DEMO / 'logs'}; Airflow task logs under {data / 'airflow' / 'logs'}")
