"""A files_to_lake job registered with a storage connection and spark-submitted the operators' way,
and what the storage tests read of it: its registry, the orders it lands, its processes' command
lines and its Spark UI's REST answers. Shared by the key/SAS and the identity tests of the job's
storage, so the job they check is the same one."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: How Spark shows a redacted value on its environment page.
REDACTED = "*********(redacted)"


def files_job_registry(tmp_path: Path, name: str, url: Callable[[str], str], ui_port: int) -> Path:
    """A registry of one streaming files_to_lake job ``name`` whose folders are ``url(<path>)``, on
    storage connection ``lake_storage``, its UI on ``ui_port`` and its event log in ``tmp_path/events``."""
    config = tmp_path / f"{name}.yaml"
    config.write_text(
        f"name: {name}\n"
        "trigger: {processingTime: 1 second}\n"
        f"checkpoint_root: {url('_checkpoints')}\n"
        f"status_root: {url('_status')}\n"
        "runtime: {heartbeat_interval: 2 seconds}\n"
        "sources:\n"
        "  landing:\n"
        "    kind: files\n"
        f"    path: {url('landing')}\n"
        f"    archive_dir: {url('_archive')}\n"
        "    format: json\n"
        '    schema: "order_id BIGINT, customer STRING, amount DECIMAL(12, 2), ordered_at TIMESTAMP"\n'
        "params: {required_columns: [order_id]}\n"
        "sinks:\n"
        "  lake:\n"
        "    kind: parquet\n"
        f"    output_path: {url('lake/orders')}\n"
        f"    quarantine_path: {url('quarantine/orders')}\n"
    )
    (tmp_path / "events").mkdir()
    registry = tmp_path / "registry.yaml"
    registry.write_text(
        "jobs:\n"
        f"  - name: {name}\n"
        "    application: files_to_lake\n"
        f"    config: {config}\n"
        "    mode: streaming\n"
        "    storage_conn_id: lake_storage\n"
        "    cores_max: 1\n"
        "    spark_conf:\n"
        "      spark.ui.enabled: 'true'\n"
        f"      spark.ui.port: '{ui_port}'\n"
        "      spark.port.maxRetries: '0'\n"
        "      spark.sql.shuffle.partitions: '1'\n"
        "      spark.eventLog.enabled: 'true'\n"
        "      spark.eventLog.compress: 'false'\n"
        f"      spark.eventLog.dir: '{tmp_path / 'events'}'\n"
    )
    return registry


def orders_json(first: int, count: int) -> str:
    """JSON lines of the orders ``first`` .. ``first + count - 1``, in the job's landing schema."""
    rows = [
        {"order_id": i, "customer": "c", "amount": "1.00", "ordered_at": "2026-11-27T08:00:00Z"}
        for i in range(first, first + count)
    ]
    return "\n".join(json.dumps(r) for r in rows)


def session_cmdlines(leader: int) -> dict[int, str]:
    """The command line (``/proc/<pid>/cmdline``, as ``ps`` shows it) of every live process in the
    session ``leader`` started: spark-submit, the JVM, the Python driver."""
    lines = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == leader:  # after ')': state ppid pgrp session
                lines[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
    return lines


def get_json(url: str) -> Any:
    """The JSON answer of a GET (Spark's REST API)."""
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)
