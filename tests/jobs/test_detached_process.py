"""start_detached: the child leads its own session, writes to the log, gets the given environment,
and outlives the starter's copy of the log descriptor."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hubflow.supervision.detached_process import start_detached

CHILD = (
    "import os, sys; print(os.environ['HUBFLOW_PROBE'], os.getsid(0) == os.getpid(), sys.stdin.read() == '')"
)


def test_the_child_leads_its_own_session_and_logs_to_the_file(tmp_path: Path) -> None:
    log = tmp_path / "nested" / "child.log"
    env = {**os.environ, "HUBFLOW_PROBE": "first"}
    assert start_detached([sys.executable, "-c", CHILD], log, env).wait(60) == 0
    env["HUBFLOW_PROBE"] = "second"
    assert start_detached([sys.executable, "-c", CHILD], log, env).wait(60) == 0
    assert log.read_text().splitlines() == ["first True True", "second True True"], "appended"

    assert start_detached([sys.executable, "-c", CHILD], log, env, append=False).wait(60) == 0
    assert log.read_text().splitlines() == ["second True True"], "truncated"
