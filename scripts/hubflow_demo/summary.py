"""The demo's summary table: every table read back with delta-rs, the restarts, the alerts
received, each job's checkpoint."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from hubflow_demo.lake import row_count, table_rows
from hubflow_demo.settings import BRONZE, LANDING_FILES, SILVER


def summarize(data: Path, registry: Path, facts: dict[str, Any]) -> Table:
    """The summary table; the lake's Delta tables are read with delta-rs, as any non-Spark reader would."""
    from hubflow_plugins.core.checkpoint_inspector import inspect_checkpoint
    from hubflow_plugins.core.registry import load_registry

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
