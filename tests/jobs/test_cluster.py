"""The packaged job on the loopback standalone cluster: build dist/, then spark-submit with --py-files."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.spark_cluster import spark_env

from .helpers import (
    FILES_TO_LAKE,
    REPO_ROOT,
    landing_config,
    last_log_line,
    read_lake,
    read_status,
    spark_submit_path,
    write_config,
    write_json_landing_file,
)

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


def test_packaged_job_runs_on_the_standalone_cluster(spark: Any, spark_cluster: Any, tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "build_dist.py"), "--out", str(tmp_path / "dist")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    artifacts = json.loads(built.stdout.strip().splitlines()[-1])
    assert Path(artifacts["wheel"]).name.startswith("hubflow_connectors-")
    # The entry script alone, away from jobs/: hubflow_jobs can only come from the zip.
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    entry = Path(shutil.copy2(FILES_TO_LAKE, app_dir / FILES_TO_LAKE.name))

    base = tmp_path / "data"
    config = write_config(tmp_path / "job.yaml", landing_config(base))
    ids = write_json_landing_file(base / "landing", "a.json", 1, good=20, bad=2)
    ids |= write_json_landing_file(base / "landing", "b.json", 100, good=10, bad=0)
    ids |= write_json_landing_file(base / "landing", "c.json", 200, good=5, bad=1)
    log = tmp_path / "job.log"
    env = spark_env()
    env.pop("PYTHONPATH", None)
    with open(log, "wb") as out:
        result = subprocess.run(
            [
                spark_submit_path(),
                "--master",
                spark_cluster.master_url,
                "--total-executor-cores",
                "1",
                "--executor-memory",
                "512m",
                "--py-files",
                f"{artifacts['jobs_zip']},{artifacts['wheel']}",
                "--conf",
                "spark.ui.enabled=false",
                str(entry),
                "--config",
                str(config),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            timeout=300,
            cwd=tmp_path,
        )

    text = log.read_text(errors="replace")
    assert result.returncode == 0, last_log_line(log)
    assert "hubflow_jobs.zip" in next(
        line for line in text.splitlines() if "job files_to_lake starting" in line
    )
    assert "finished: no more input" in last_log_line(log)
    assert sorted(r["id"] for r in read_lake(spark, base / "lake" / "orders")) == sorted(ids)
    assert len(read_lake(spark, base / "quarantine")) == 3
    assert read_status(base)["counts"] == {"read": 38, "written": 35, "quarantined": 3}
