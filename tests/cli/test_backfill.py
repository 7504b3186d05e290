"""``hubflow backfill``: what cannot be backfilled is refused with exit 2 and the reason, nothing run;
an on-call action in progress on the job refuses it with exit 3.

The backfill itself, on local Spark against the emulator, runs in the tutorial
(tests/cli/test_tutorial.py) and, without the command, in tests/jobs/test_pipeline_backfill.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.cli.helpers import hubflow, output

pytestmark = pytest.mark.integration

WINDOW = ("--start", "2026-11-25T10:00:00Z", "--end", "2026-11-25T11:00:00Z")


def test_backfill_refuses_an_unknown_job_a_reversed_window_and_a_files_pipeline(tmp_path: Path) -> None:
    pipelines, registry = tmp_path / "pipelines", tmp_path / "registry.yaml"
    created = hubflow("new", "pipeline", "orders", "--dir", pipelines, "--registry", registry)
    assert created.returncode == 0, output(created)

    unknown = hubflow("backfill", "nosuch", *WINDOW, "--registry", registry, pipelines=pipelines)
    assert unknown.returncode == 2
    assert "no job named 'nosuch' in the registry; registered jobs: orders" in unknown.stdout

    reversed_window = ("--start", WINDOW[3], "--end", WINDOW[1])
    backwards = hubflow("backfill", "orders", *reversed_window, "--registry", registry, pipelines=pipelines)
    assert backwards.returncode == 2
    assert "--window-start 2026-11-25T11:00:00Z must be before --window-end 2026-11-25T10:00:00Z" in (
        backwards.stdout
    )
    assert "spark-submit" not in backwards.stdout, "nothing was started"

    # An on-call action in progress on the job (here a restart from the command line): refused, exit 3.
    from hubflow.registry import load_registry
    from hubflow.status import StatusFolder
    from hubflow.status.action_lock import ActionLock

    folder = StatusFolder(load_registry(registry).job("orders").paths.status_dir)
    with ActionLock(folder, "orders", "restart", "carol", "cli").held():
        locked = hubflow("backfill", "orders", *WINDOW, "--registry", registry, pipelines=pipelines)
    assert locked.returncode == 3, output(locked)
    assert "hubflow backfill: job orders: a restart started by carol (cli) at " in locked.stdout
    assert "the backfill is refused" in locked.stdout and "spark-submit" not in locked.stdout

    # A job scheduled on the orders table: told that it will not follow (no Airflow, no asset event).
    entries = yaml.safe_load(registry.read_text(encoding="utf-8"))
    entries["jobs"].append({**entries["jobs"][0], "name": "orders_daily", "schedule": "asset(orders)"})
    registry.write_text(yaml.safe_dump(entries), encoding="utf-8")
    files = hubflow("backfill", "orders", *WINDOW, "--registry", registry, pipelines=pipelines, timeout=300)
    assert files.returncode == 2, output(files)
    assert "backfilling job orders [2026-11-25T10:00:00Z, 2026-11-25T11:00:00Z)" in files.stdout
    assert (
        "note: orders_daily read orders's tables and do not follow a backfill run outside Airflow: "
        "backfill the same interval of each with hubflow backfill, or backfill the hours in Airflow "
        "through orders__backfill, which they follow"
    ) in files.stdout
    assert (
        "job orders: sources.landing.interval_folder is not set, so a backfill cannot tell which landing "
        "folder holds an interval's files; set it to the landing layout, e.g. %Y/%m/%d/%H"
    ) in files.stdout
    assert not (tmp_path / "data" / "lake").exists(), "nothing was written"
