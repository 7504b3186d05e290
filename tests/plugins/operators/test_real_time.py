"""A real-time pipeline as ``hubflow new pipeline --trigger realtime`` writes it and docs/pipelines.md
shows it ("Real-time pipelines"), supervised by the real streaming operator with a real spark-submit
(no scheduler), from one emulated hub to another through their Kafka endpoint: every event sent
while it runs is forwarded once, the job is judged running and not stalled between its commits, and
a supervisor stop ends it gracefully. A real-time plan Spark refuses (an aggregation) exits 2 with
the message naming ``trigger.realTime``."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from hubflow.status import StatusFolder
from hubflow_plugins.operators.streaming_job import StreamingJobOperator
from tests.cli.helpers import hubflow, output
from tests.jobs.helpers import EmulatedHub, event_count, receive_all
from tests.support.processes import wait_until
from tests.support.spark_cluster import spark_env

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]
DOC_DATA = "/srv/hubflow/data"
EMULATOR_LINE = "# kafka_bootstrap_servers: 127.0.0.1:9093"


def _supervise(action: str = "ensure_running") -> dict[str, Any]:
    context = {
        "dag_run": SimpleNamespace(run_type="scheduled", run_id="scheduled__1", triggering_user_name=None)
    }
    return StreamingJobOperator(
        task_id=action,
        job_name="fwd",
        action=action,
        start_timeout=timedelta(minutes=5),
        stop_wait=timedelta(minutes=2),
    ).execute(context)


def _documented_config() -> str:
    doc = (REPO_ROOT / "docs" / "pipelines.md").read_text(encoding="utf-8")
    section = doc.split("\n## Real-time pipelines\n", 1)[1].split("\n## ", 1)[0]
    (config,) = [b for b in re.findall(r"```yaml\n(.*?)```", section, re.S) if "realTime" in b]
    return config


@pytest.mark.timeout(900)
def test_the_scaffolded_real_time_pipeline_forwards_every_event_supervised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eventhubs_emulator import Emulator, EmulatorConfig

    pipelines, registry, data = tmp_path / "pipelines", tmp_path / "registry.yaml", tmp_path / "data"
    created = hubflow(
        "new", "pipeline", "fwd", "--trigger", "realtime", "--dir", pipelines, "--data-dir", data,
        "--registry", registry,
    )  # fmt: skip
    assert created.returncode == 0, output(created)
    config_path = pipelines / "configs" / "fwd.yaml"
    text = config_path.read_text(encoding="utf-8")
    assert text.replace(str(data), DOC_DATA) == _documented_config(), "the docs show what the command writes"

    for key, value in spark_env(
        {"AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark", "host": "local[3]"}'}
    ).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HUBFLOW_REGISTRY", str(registry))
    monkeypatch.setenv("HUBFLOW_PIPELINES_DIR", str(pipelines))
    with Emulator(EmulatorConfig.many_hubs({"fwd": 2, "fwd_output": 2}, kafka_port=0)) as emulator:
        config_path.write_text(
            text.replace(EMULATOR_LINE, f"kafka_bootstrap_servers: {emulator.kafka_bootstrap}"),
            encoding="utf-8",
        )
        monkeypatch.setenv("FWD_EVENTHUBS_CONNECTION", emulator.connection_string("fwd"))
        monkeypatch.setenv("FWD_OUTPUT_EVENTHUBS_CONNECTION", emulator.connection_string("fwd_output"))
        checked = hubflow("check", "--local", "--registry", registry, pipelines=pipelines)
        assert checked.returncode == 0 and "ok    fwd  (fwd:transform)" in checked.stdout, output(checked)
        folder = StatusFolder(str(data / "status" / "fwd"))
        source = EmulatedHub("fwd", emulator.connection_string("fwd"), partitions=2)
        output_hub = emulator.connection_string("fwd_output")
        try:
            started = _supervise()
            assert any(line.startswith("started job fwd") for line in started["done"]), started
            sent = {str(p): [f"event-{p}-{n}".encode() for n in range(20)] for p in range(2)}
            source.send(sent)  # while it runs: forwarded as they arrive
            wait_until(lambda: event_count(output_hub) >= 40, 120, "40 events forwarded")
            forwarded = sorted(bytes(next(event.body)) for _, event in receive_all(output_hub))
            assert forwarded == sorted(body for bodies in sent.values() for body in bodies), "each once"
            assert folder.liveness(60).alive
            assert _supervise()["done"] == ["already running; nothing to do"]
        finally:
            stopped = _supervise("stop")
        assert any("stopped gracefully" in line for line in stopped["done"]), stopped
        # Spark's real-time mode, not micro-batches: its readers run to no end offset (Long.MaxValue).
        driver_log = Path(folder.path("driver.log")).read_text(encoding="utf-8", errors="replace")
        assert "untilOffset=9223372036854775807" in driver_log
        status = folder.status() or {}
        assert status.get("state") == "stopped", status
