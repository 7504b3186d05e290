"""The docker-compose stack for the tests: scripts/stack.sh, the image build started early, docker.

``make test`` spends most of its time in other tests; the stack's images (a Debian base made with
debootstrap, PostgreSQL and Redis from Debian's packages, the project image) take minutes to make on
a fresh machine. :func:`start_image_build` starts ``scripts/stack.sh images`` in the background when
the collected tests include the stack proof, and :func:`wait_for_image_build` joins it when the proof
starts (``tests/conftest.py`` wires both). Everything runs through ``scripts/stack.sh``, the same
commands ``make stack-up`` / ``make stack-down`` run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hubflow.supervision.detached_process import start_detached

REPO_ROOT = Path(__file__).resolve().parents[2]
STACK_SCRIPT = REPO_ROOT / "scripts" / "stack.sh"
STATE_DIR = REPO_ROOT / ".hubflow" / "stack"
IMAGE_BUILD_LOG = STATE_DIR / "images-background.log"
#: The compose project of the stack proof: its own containers, network and volumes
#: (``HUBFLOW_PROOF_PROJECT`` names another, e.g. for two checkouts sharing one Docker daemon).
PROOF_PROJECT = os.environ.get("HUBFLOW_PROOF_PROJECT") or "hubflow-proof"

_build: subprocess.Popen | None = None
_build_started = 0.0


def docker_unavailable() -> str | None:
    """Why Docker cannot run here (``scripts/stack.sh check``), or None when it can."""
    result = subprocess.run(
        ["bash", str(STACK_SCRIPT), "check"], capture_output=True, text=True, timeout=120, check=False
    )
    return None if result.returncode == 0 else (result.stdout.strip() or result.stderr.strip())


def start_image_build() -> None:
    """Start ``scripts/stack.sh images`` in the background (once), when Docker can run here."""
    global _build, _build_started
    if _build is not None or docker_unavailable():
        return
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    _build = start_detached(
        ["bash", str(STACK_SCRIPT), "images"],
        IMAGE_BUILD_LOG,
        {**os.environ, "COMPOSE_PROJECT_NAME": PROOF_PROJECT, "HUBFLOW_STACK_FRESH": "1"},
        append=False,
    )
    _build_started = time.monotonic()


def wait_for_image_build(timeout: float = 3600) -> bool:
    """Join the background build; True when it made the images (so ``up --no-build`` need not build
    them again), False when none ran; raise with its log's tail when it failed."""
    if _build is None:
        return False
    code = _build.wait(timeout=timeout)
    if code != 0:
        tail = IMAGE_BUILD_LOG.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"scripts/stack.sh images failed (exit {code}):\n{tail}")
    return True


def stop_image_build_and_docker() -> None:
    """At the session's end: stop a background build that is still running, and when one was
    started, ``scripts/stack.sh down`` so that a dockerd it started stops too (the proof, when it
    ran, did that already; running it again changes nothing)."""
    if _build is None:
        return
    if _build.poll() is None:
        os.killpg(_build.pid, signal.SIGTERM)
        try:
            _build.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(_build.pid, signal.SIGKILL)
            _build.wait(timeout=60)
    if os.environ.get("HUBFLOW_PROOF_KEEP") == "1":
        return  # debugging the proof: its stack stays up
    subprocess.run(
        ["bash", str(STACK_SCRIPT), "down"],
        env={**os.environ, "COMPOSE_PROJECT_NAME": PROOF_PROJECT},
        capture_output=True,
        timeout=600,
        check=False,
    )


def image_build_seconds() -> float | None:
    """How long the background build ran, when it ran."""
    return None if _build is None else time.monotonic() - _build_started


@dataclass
class ComposeStack:
    """A running compose project started by ``scripts/stack.sh up``."""

    project: str
    env: dict[str, str]
    ports: dict[str, int]
    timings: dict[str, float] = field(default_factory=dict)

    def script(self, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
        """Run ``scripts/stack.sh ARGS`` for this project; its output is in the result."""
        return subprocess.run(
            ["bash", str(STACK_SCRIPT), *args],
            env=self.env,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def containers(self, service: str | None = None, all_states: bool = False) -> list[dict[str, Any]]:
        """``docker inspect`` of the project's containers (of one service)."""
        filters = ["--filter", f"label=com.docker.compose.project={self.project}"]
        if service:
            filters += ["--filter", f"label=com.docker.compose.service={service}"]
        ids = docker("ps", "-q", *(["-a"] if all_states else []), *filters).split()
        return json.loads(docker("inspect", *ids)) if ids else []

    def container(self, service: str) -> str:
        """The name of the one running container of ``service``."""
        found = self.containers(service)
        if len(found) != 1:
            raise AssertionError(f"expected one running container of {service}, found {len(found)}")
        return found[0]["Name"].lstrip("/")

    def exec(
        self,
        service: str,
        *command: str,
        user: str = "50000:0",
        stdin: str | None = None,
        timeout: float = 300,
    ) -> str:
        """Run ``command`` in the service's container; return its stdout (raise on failure)."""
        return docker(
            "exec",
            *(["-i"] if stdin is not None else []),
            "-u",
            user,
            self.container(service),
            *command,
            stdin=stdin,
            timeout=timeout,
        )


def docker(*args: str, stdin: str | None = None, timeout: float = 300) -> str:
    """Run ``docker ARGS``; return stdout, raise with stderr when it fails."""
    result = subprocess.run(
        ["docker", *args], input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args[:3])} ... failed: {result.stderr.strip()[-2000:]}")
    return result.stdout
