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


def test_a_failed_run_prints_its_reason_from_status_json(tmp_path: Path) -> None:
    """The one-line reason comes from the run's status.json (``outcome``), not from the driver
    log's physical last line, which Spark's JVM may write after the driver's own."""
    pipelines, registry = tmp_path / "pipelines", tmp_path / "registry.yaml"
    created = hubflow("new", "pipeline", "orders", "--dir", pipelines, "--registry", registry)
    assert created.returncode == 0, output(created)
    module = pipelines / "orders.py"
    signature = "def transform(landing: DataFrame, params: Params) -> DataFrame:\n"
    source = module.read_text(encoding="utf-8")
    assert signature in source
    failing = signature + '    raise ValueError("the currency table is missing")\n'
    module.write_text(source.replace(signature, failing), encoding="utf-8")
    config_path = pipelines / "configs" / "orders.yaml"
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    config["spark_conf"]["spark.ui.enabled"] = False
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")

    run = hubflow(
        "run", "orders", "--once", "--every", "1", "--registry", registry, pipelines=pipelines, timeout=540
    )

    assert run.returncode == 1, output(run)
    assert "job orders exited 1: failed: its reason is below" in run.stdout, output(run)
    reason = [line for line in run.stdout.splitlines() if line.startswith("reason: ")]
    assert reason and "job orders failed" in reason[0], output(run)
    assert "ValueError: the currency table is missing" in reason[0], output(run)
