"""What the stack's jobs wrote, read inside a container of the stack; prints one JSON report.

Run by the stack proof as ``docker exec -i <container> python - < verify_data.py``. Where the jobs
write is asked of the project's own code: the proof's job configs (tests/deploy/stack/*.yaml,
mounted at /opt/hubflow/stack-test) loaded with the jobs' own config models. Both sinks are Delta
tables, read with delta-rs (PyPI ``deltalake``, in the image for the status page): a reader other
than the Spark that wrote them, which sees only committed versions, and no JVM to start beside the
stream on 2 cores. Backfilled intervals are the job's own rows of the interval's folders (by
``_source_file``), which a backfill replaces in place. The landing job's checkpoint is read as Spark
wrote it (``sources/0/<batch>`` lists a batch's files, ``commits/<batch>`` exists once the batch is
committed), independently of hubflow's own checkpoint code, so the report can judge the archive.
"""

import json
import os
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path

from hubflow.config import load_config
from hubflow_jobs.builtins.files_to_lake import SINK, SOURCE, FilesToLakeConfig
from hubflow_jobs.pipeline import PipelineConfig

CONFIGS = Path("/opt/hubflow/stack-test")
# The telemetry config names the variable its connection string comes in; a driver gets it from the
# eventhubs_default connection, and so does this report (it never connects: it reads the lake).
EVENTHUBS_CONNECTION = json.loads(os.environ["AIRFLOW_CONN_EVENTHUBS_DEFAULT"])
os.environ.setdefault("HUBFLOW_EVENTHUBS_CONNECTION_STRING", EVENTHUBS_CONNECTION["password"])
# telemetry_bronze runs a pipeline of a user's own (tagged_events:tagged): the plain pipeline config.
TELEMETRY = load_config(CONFIGS / "telemetry_bronze.yaml", PipelineConfig)
ORDERS = load_config(CONFIGS / "landing_orders.yaml", FilesToLakeConfig)
CHECKPOINT = Path(ORDERS.checkpoint_location)
ORDERS_SOURCE, ORDERS_SINK = ORDERS.sources[SOURCE], ORDERS.sinks[SINK]
LANDING = Path(ORDERS_SOURCE.path)
ARCHIVE = Path(ORDERS_SOURCE.archive_dir)


def checkpoint_files() -> dict[str, list[str]]:
    """Files of committed and of uncommitted batches of the landing job's file source."""
    committed, uncommitted = [], []
    commits = CHECKPOINT / "commits"
    source_log = CHECKPOINT / "sources" / "0"
    if not source_log.is_dir():
        return {"committed": [], "uncommitted": []}
    for entry in sorted(source_log.iterdir()):
        name = entry.name.removesuffix(".compact")
        if not name.isdigit():
            continue
        lines = entry.read_text(encoding="utf-8").splitlines()[1:]  # the first line is the version
        for line in lines:
            record = json.loads(line)
            path = record["path"].removeprefix("file://")
            batch = int(record.get("batchId", name))
            (committed if (commits / str(batch)).exists() else uncommitted).append(path)
    return {"committed": sorted(set(committed)), "uncommitted": sorted(set(uncommitted))}


def read_table(path: str, columns: list[str]) -> dict[str, list] | None:
    """``columns`` of the Delta table at ``path`` as its current version holds them; None when absent."""
    from deltalake import DeltaTable

    if not os.path.isdir(os.path.join(path, "_delta_log")):
        return None
    return DeltaTable(path).to_pyarrow_table(columns=columns).to_pydict()


def interval_label(source_file: str) -> str:
    """The backfill window of a landing file: its interval folder under the landing path, as the
    backfill labels windows (``%Y-%m-%dT%H:%M:%SZ``)."""
    folder = os.path.dirname(source_file.removeprefix("file:").lstrip("/"))
    relative = os.path.relpath("/" + folder, str(LANDING))
    return datetime.strptime(relative, ORDERS_SOURCE.interval_folder).strftime("%Y-%m-%dT%H:%M:%SZ")


def files_under(root: Path) -> list[str]:
    return (
        sorted(str(p) for p in root.rglob("*") if p.is_file() and not p.name.startswith((".", "_")))
        if root.is_dir()
        else []
    )


def replacements(path: str) -> int:
    """How many commits of the Delta table at ``path`` replaced rows (``replaceWhere``: an overwrite
    with a predicate), from its history."""
    from deltalake import DeltaTable

    return sum(
        1
        for commit in DeltaTable(path).history()
        if (commit.get("operationParameters") or {}).get("mode") == "Overwrite"
        and (commit.get("operationParameters") or {}).get("predicate")
    )


#: How many repeated ids or hub positions the report names (enough to see what went wrong).
SAMPLE = 20


def telemetry_identities(table: dict[str, list]) -> dict:
    """The telemetry table's events by identity: each row's id from ``text`` (the pipeline's copy of
    the body the proof sent, ``{"id": n}``) and its place in the hub (``partition``,
    ``sequenceNumber``). The proof sent ids 0..n-1 once each: all there exactly once when rows ==
    distinct == n, min == 0, max == n - 1 and no_id == 0; no event written twice when
    distinct_positions == rows. Up to SAMPLE repeated ids and positions are named."""
    ids = []
    for text in table["text"]:
        try:
            ids.append(int(json.loads(text)["id"]))
        except (TypeError, ValueError, KeyError):
            ids.append(None)
    known = [i for i in ids if i is not None]
    positions = Counter(zip(table["partition"], table["sequenceNumber"], strict=True))
    return {
        "rows": len(ids),
        "distinct": len(set(known)),
        "min": min(known, default=None),
        "max": max(known, default=None),
        "no_id": len(ids) - len(known),
        "distinct_positions": len(positions),
        "repeated_ids": sorted([i, n] for i, n in Counter(known).items() if n > 1)[:SAMPLE],
        "repeated_positions": sorted([*p, n] for p, n in positions.items() if n > 1)[:SAMPLE],
    }


def main() -> int:
    sinks = {"telemetry": TELEMETRY.sinks["bronze"], "orders": ORDERS_SINK}
    not_delta = {name: sink.kind for name, sink in sinks.items() if sink.kind != "delta"}
    if not_delta:
        raise SystemExit(f"verify_data.py reads Delta sinks only (delta-rs); these are not: {not_delta}")
    report: dict = {"formats": {name: sink.kind for name, sink in sinks.items()}}
    telemetry = read_table(TELEMETRY.sinks["bronze"].output_path, ["text", "partition", "sequenceNumber"])
    if telemetry is not None:
        report["telemetry"] = telemetry_identities(telemetry)
    orders = read_table(ORDERS_SINK.output_path, ["order_id", "_source_file"])
    quarantine = read_table(ORDERS_SINK.quarantine_path, ["raw_record", "source_file"])
    if orders is not None:
        report["orders_ids"] = sorted(orders["order_id"])
    if quarantine is not None:
        report["quarantine_raw"] = sorted(quarantine["raw_record"])
    # A backfill replaces the interval's rows in the job's own tables. Lake rows name their file in
    # ``_source_file``, quarantine rows in ``source_file``.
    backfill: dict = {}
    for table, key, value, column in (
        (orders, "ids", "order_id", "_source_file"),
        (quarantine, "raw", "raw_record", "source_file"),
    ):
        rows = zip(table[value], table[column], strict=True) if table is not None else ()
        for item, source_file in rows:
            entry = backfill.setdefault(interval_label(source_file), {"ids": [], "raw": []})
            entry[key].append(item)
    report["backfill"] = {
        window: {k: sorted(v) for k, v in entry.items()} for window, entry in backfill.items()
    }
    # The backfill's replaceWhere commits (the stream only appends).
    tables = {"orders": ORDERS_SINK.output_path, "quarantine": ORDERS_SINK.quarantine_path}
    report["replacements"] = {name: replacements(path) for name, path in tables.items()}
    report["checkpoint"] = checkpoint_files()
    report["archive_files"] = files_under(ARCHIVE)
    report["landing_files"] = files_under(LANDING)
    print("REPORT " + json.dumps(report, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
