"""docs/pipelines.md's tutorial, run as written in a project folder of its own.

Every ``bash`` block runs in one shell session after the other (its environment carried on, so
``source .venv/bin/activate`` and ``export`` hold for the next block); a ``python file=PATH`` block is
written to PATH; a ``yaml edit=PATH`` block's keys are merged into PATH (the top-level keys named by
``replace=KEY,...`` replace the file's whole section). Only ``make demo`` (marked
``tutorial=skip``) is replaced: the demo's own emulator config, events and connection file, without
Airflow. Then the pipeline's Delta table must hold every hot reading of the demo exactly once, by
the threshold of the tutorial's backfill.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hubflow_demo import sample_data, settings

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "pipelines.md"
#: A fenced block: its language, its attributes (``key=value``), its text.
BLOCK = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.S | re.M)

pytestmark = pytest.mark.integration


def tutorial_blocks() -> list[tuple[str, dict[str, str], str]]:
    """The fenced blocks of the tutorial section, in order."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Tutorial") :]
    section = section[: section.index("\n## ", 1)]
    blocks = []
    for language, attributes, body in BLOCK.findall(section):
        attrs = dict(part.split("=", 1) for part in attributes.split())
        blocks.append((language, attrs, body))
    return blocks


def _run_bash(script: str, project: Path, env: dict[str, str]) -> dict[str, str]:
    """Run a bash block in ``project`` with ``env``; return the environment it leaves."""
    dump = project / ".tutorial-env"
    result = subprocess.run(
        ["bash", "-c", f"set -euo pipefail\n{script}\nenv -0 > {dump}"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, f"tutorial step failed:\n{script}\n{result.stdout}\n{result.stderr}"
    pairs = dump.read_text(encoding="utf-8").split("\0")
    return dict(pair.split("=", 1) for pair in pairs if "=" in pair)


def _merge(target: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value
    return target


def test_the_pipelines_tutorial_runs_as_written(tmp_path: Path) -> None:
    from eventhubs_emulator import Emulator

    blocks = tutorial_blocks()
    assert [lang for lang, _, _ in blocks].count("bash") >= 4, "the tutorial's commands were found"
    project = tmp_path / "project"
    (project / "dags").mkdir(parents=True)
    (project / ".venv").symlink_to(REPO / ".venv")
    shutil.copy(REPO / "dags" / "registry.yaml", project / "dags" / "registry.yaml")
    env = {
        **os.environ,
        "HUBFLOW_REGISTRY": str(project / "dags" / "registry.yaml"),
        "HUBFLOW_PIPELINES_DIR": str(project / "pipelines"),
    }
    with Emulator(sample_data.emulator_config(), port=0) as emulator:
        # What `make demo` does for the tutorial: the hub, its events, the connection file.
        connection = emulator.connection_string(settings.HUB)
        sent = sample_data.send_events(connection)
        connection_file = project / settings.CONNECTION_FILE.relative_to(settings.REPO)
        connection_file.parent.mkdir(parents=True)
        connection_file.write_text(connection, encoding="utf-8")

        for language, attrs, body in blocks:
            if attrs.get("tutorial") == "skip":
                continue
            if language == "bash":
                env = _run_bash(body, project, env)
            elif language == "python" and "file" in attrs:
                (project / attrs["file"]).write_text(body, encoding="utf-8")
            elif language == "yaml" and "edit" in attrs:
                path = project / attrs["edit"]
                config = yaml.safe_load(path.read_text(encoding="utf-8"))
                change = yaml.safe_load(body)
                for key in filter(None, attrs.get("replace", "").split(",")):
                    config[key] = change.pop(key)
                config = _merge(config, change)
                path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
            else:
                raise AssertionError(f"a tutorial block the test cannot run: ```{language} {attrs}")

    from deltalake import DeltaTable

    rows = DeltaTable(str(project / "data" / "lake" / "hot_devices")).to_pyarrow_table().to_pylist()
    places = [(row["partition"], row["sequenceNumber"]) for row in rows]
    assert len(places) == len(set(places)), "an event was written twice"
    # The demo's reading i is {"device": f"dev-{i % 25}", "reading": i, "celsius": 20 + i % 15}. The
    # run kept celsius >= 30; the backfill of the last hour (every event) replaced them by >= 33.
    hot = {i for i in range(sent) if 20 + i % 15 >= 33}
    assert sorted(row["reading"] for row in rows) == sorted(hot)
    assert all(row["device"] == f"dev-{row['reading'] % 25}" for row in rows)
