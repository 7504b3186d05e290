"""``hubflow backfill``: what cannot be backfilled is refused with exit 2 and the reason, nothing run.

The backfill itself, on local Spark against the emulator, runs in the tutorial
(tests/cli/test_tutorial.py) and, without the command, in tests/jobs/test_pipeline_backfill.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

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

    files = hubflow("backfill", "orders", *WINDOW, "--registry", registry, pipelines=pipelines, timeout=300)
    assert files.returncode == 2, output(files)
    assert "backfilling job orders [2026-11-25T10:00:00Z, 2026-11-25T11:00:00Z)" in files.stdout
    assert (
        "job orders: sources.landing.interval_folder is not set, so a backfill cannot tell which landing "
        "folder holds an interval's files; set it to the landing layout, e.g. %Y/%m/%d/%H"
    ) in files.stdout
    assert not (tmp_path / "data" / "lake").exists(), "nothing was written"
