"""The processes the demo starts (detached, each in a group of its own, recorded in pids.json)."""

from __future__ import annotations

import json
import os
import subprocess

from hubflow.supervision.detached_process import start_detached
from hubflow_demo.settings import DEMO, PIDS


def start(name: str, command: list[str], env: dict[str, str]) -> subprocess.Popen:
    process = start_detached(command, DEMO / "logs" / f"{name}.log", env)
    pids = json.loads(PIDS.read_text()) if PIDS.exists() else {}
    pids[name] = process.pid
    PIDS.write_text(json.dumps(pids))
    return process


def group_of(pid: int) -> int | None:
    """The process group of ``pid`` when it is a group of its own (a detached spark-submit), else None."""
    try:
        group = os.getpgid(pid)
    except ProcessLookupError:
        return None
    return group if group not in (os.getpgid(0), 0, 1) else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
