"""``hubflow run NAME --once``: a generated files pipeline runs on local Spark to the end, exit 0.

One spark-submit. The config's trigger is made processingTime first, so the run ends only because
``--once`` runs the copy with availableNow. Then ``hubflow status`` shows the run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.cli.helpers import hubflow, output

pytestmark = pytest.mark.integration


def _landing_file(folder: Path, name: str, records: list[dict], broken: tuple[str, ...] = ()) -> None:
    temp = folder / f".{name}.tmp"
    temp.write_text("".join(json.dumps(r) + "\n" for r in records) + "".join(f"{b}\n" for b in broken))
    temp.rename(folder / name)  # appear whole, as a landing upload should


def test_run_once_processes_every_landed_record_once(tmp_path: Path) -> None:
    pipelines, registry = tmp_path / "pipelines", tmp_path / "registry.yaml"
    created = hubflow("new", "pipeline", "orders", "--dir", pipelines, "--registry", registry)
    assert created.returncode == 0, output(created)
    config_path = pipelines / "configs" / "orders.yaml"
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    config["trigger"] = {"processingTime": "5 seconds"}
    config["spark_conf"]["spark.ui.enabled"] = False
    config["runtime"] = {"heartbeat_interval": "1 second", "poll_interval": "200 ms"}
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    landing = Path(config["sources"]["landing"]["path"])
    _landing_file(
        landing, "a.json", [{"id": 1, "name": "a", "amount": 3.5}, {"id": 2, "name": "b", "amount": 1}]
    )
    _landing_file(landing, "b.json", [{"id": 3, "name": "c", "amount": 7}], broken=["not json"])

    run = hubflow(
        "run", "orders", "--once", "--every", "1", "--registry", registry, pipelines=pipelines, timeout=540
    )

    assert run.returncode == 0, output(run)
    assert "--once: running" in run.stdout
    assert "] orders: state " in run.stdout  # at least one progress line from status.json
    assert "job orders exited 0: finished" in run.stdout
    from deltalake import DeltaTable

    rows = DeltaTable(config["sinks"]["output"]["output_path"]).to_pyarrow_table().to_pylist()
    assert sorted(row["id"] for row in rows) == [1, 2, 3]
    quarantined = DeltaTable(config["sinks"]["output"]["quarantine_path"]).to_pyarrow_table().to_pylist()
    assert [row["_quarantine_reason"] for row in quarantined] == ["does not parse: not json"]

    status = hubflow("status", "orders", "--registry", registry)
    assert status.returncode == 0, output(status)
    assert "state       stopped" in status.stdout
    assert "input rows" in status.stdout and "lease       free" in status.stdout
