"""The status page in headless Chromium: the charts are drawn, and visible in a screenshot.

Chromium is Debian's ``chromium`` package (no browser download); the test is skipped with the
reason when it is not installed. Chromium runs with no network access beyond 127.0.0.1, so a page
that needed a CDN would show no charts here.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hubflow.supervision.airflow_readiness import wait_until_ready
from hubflow.supervision.detached_process import start_detached
from tests.plugins.status_page.conftest import StatusWorld
from tests.plugins.status_page.png import read_png
from tests.plugins.status_page.test_airflow_plugin import plugin_env

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
RATE_COLOUR = (0x1F, 0x6F, 0xEB)  # status_page.js COLORS.input_rows_per_second
LAG_COLOUR = (0xD9, 0x48, 0x0F)  # status_page.js COLORS.lag
WINDOW = (1280, 1400)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def page_url(status_world: StatusWorld) -> Iterator[str]:
    """The status page served by uvicorn in a child process on 127.0.0.1."""
    port = _free_port()
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(str(REPO_ROOT / p) for p in ("control", "plugins", "jobs", ""))
    )
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.plugins.status_page.serve_status_page",
            "--registry",
            str(status_world.registry),
            "--port",
            str(port),
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        # A bound for a hang, not the start-up (an exited server fails at once).
        deadline = time.monotonic() + 300
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    output = server.stdout.read().decode(errors="replace") if server.stdout else ""
                    raise AssertionError(f"the status page server did not start:\n{output}") from None
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/hubflow/"
    finally:
        server.terminate()
        server.wait(timeout=10)


def run_chromium(tmp_path: Path, *args: str, budget_ms: int = 5000) -> subprocess.CompletedProcess:
    """Headless Chromium with no sandbox, GPU, QUIC, sync or background network traffic."""
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed: apt-get install -y chromium chromium-driver")
    profile = tmp_path / "chromium-profile"
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            f"--user-data-dir={profile}",
            f"--virtual-time-budget={budget_ms}",
            f"--window-size={WINDOW[0]},{WINDOW[1]}",
            "--hide-scrollbars",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_scripts_draw_every_chart(page_url: str, status_world: StatusWorld, tmp_path: Path) -> None:
    result = run_chromium(tmp_path, "--dump-dom", page_url)
    dom = result.stdout
    assert 'data-charts-ready="true"' in dom, f"the page script did not run:\n{result.stderr[-2000:]}"
    points = dict(re.findall(r'id="(chart-[a-z]+-[a-z_]+)"[^>]*?data-points="(\d+)"', dom))
    if not points:  # attribute order differs between Chromium versions
        points = {
            m[1]: m[0] for m in re.findall(r'data-points="(\d+)"[^>]*?id="(chart-[a-z]+-[a-z_]+)"', dom)
        }
    rows = len(status_world.progress["events_history"])
    assert int(points["chart-rate-events_history"]) >= rows
    assert int(points["chart-lag-events_history"]) >= rows
    assert int(points["chart-rate-events_plain"]) >= rows - 1
    assert int(points["chart-lag-events_plain"]) == 1
    assert points["chart-rate-never_ran"] == "0" and "no data yet" in dom
    # The backlog in seconds, one point per batch the Event Hubs source reported it for.
    seconds = dict(re.findall(r'id="chart-lag-seconds-([a-z_]+)"[^>]*?data-points="(\d+)"', dom))
    if not seconds:
        seconds = {
            m[1]: m[0] for m in re.findall(r'data-points="(\d+)"[^>]*?id="chart-lag-seconds-([a-z_]+)"', dom)
        }
    assert int(seconds["events_history"]) >= rows and seconds["never_ran"] == "0"


def _pixels_near(image: np.ndarray, colour: tuple[int, int, int], tolerance: int = 30) -> int:
    distance = np.abs(image.astype(np.int16) - np.array(colour, dtype=np.int16)).max(axis=2)
    return int((distance <= tolerance).sum())


def test_screenshot_shows_rate_and_lag_charts(page_url: str, tmp_path: Path) -> None:
    shot = tmp_path / "status_page.png"
    result = run_chromium(tmp_path, f"--screenshot={shot}", page_url)
    assert shot.exists(), f"chromium wrote no screenshot:\n{result.stderr[-2000:]}"
    kept = os.environ.get("HUBFLOW_KEEP_SCREENSHOT")
    if kept:
        shutil.copy(shot, kept)
    image = read_png(shot)
    assert image.shape[:2] == (WINDOW[1], WINDOW[0])
    # The lines, dots and shaded areas of the charts: these colours appear nowhere else on the page.
    assert _pixels_near(image, RATE_COLOUR) > 300
    assert _pixels_near(image, LAG_COLOUR) > 300
    # Not a blank page: most pixels are background, but far from all.
    background = _pixels_near(image, (0xF6, 0xF8, 0xFA), 2) + _pixels_near(image, (0xFF, 0xFF, 0xFF), 2)
    assert background < image.shape[0] * image.shape[1] * 0.98


@pytest.fixture(scope="module")
def airflow_ui(
    airflow_home: Any, status_world: StatusWorld, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A real ``airflow api-server`` (plugins loaded, every user an admin) on 127.0.0.1."""
    port = _free_port()
    env = plugin_env(airflow_home, status_world.registry)
    empty_dags = tmp_path_factory.mktemp("no-dags")
    env.update(
        {
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__DAGS_FOLDER": str(empty_dags),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        }
    )
    log = tmp_path_factory.mktemp("api-server") / "api-server.log"
    server = start_detached(
        [
            str(Path(sys.executable).parent / "airflow"),
            "api-server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        log,
        env,
        append=False,
    )
    try:
        # The API server alone (no scheduler here); the bound is for a hang, not for its start-up,
        # which on a loaded machine takes minutes: an exited server ends the wait at once.
        wait_until_ready(
            f"http://127.0.0.1:{port}",
            services=(),
            timeout=600,
            interval=0.5,
            still_starting=lambda: None if server.poll() is None else f"exited:\n{log.read_text()[-3000:]}",
        )
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)


def test_page_shows_inside_the_airflow_ui(airflow_ui: str, tmp_path: Path) -> None:
    """The external view's route in Airflow's own UI embeds the page, charts drawn."""
    shot = tmp_path / "airflow_ui.png"
    url = f"{airflow_ui}/plugin/hubflow-status"
    result = run_chromium(tmp_path, f"--screenshot={shot}", url, budget_ms=15000)
    assert shot.exists(), f"chromium wrote no screenshot:\n{result.stderr[-2000:]}"
    kept = os.environ.get("HUBFLOW_KEEP_SCREENSHOT")
    if kept:
        shutil.copy(shot, kept.replace(".png", "") + "-airflow-ui.png")
    # Right of Airflow's navigation bar (its logo has blues and reds of its own): the embedded page.
    page = read_png(shot)[:, 120:]
    assert _pixels_near(page, RATE_COLOUR) > 300
    assert _pixels_near(page, LAG_COLOUR) > 300


def test_the_page_script_refreshes_the_audit_trail(
    page_url: str, status_world: StatusWorld, tmp_path: Path
) -> None:
    """After its refresh (every 10 s), the script has rebuilt the job's audit table from the API:
    its cells are plain text (the server's template marks a dry run with a span)."""
    from hubflow.operations.audit import AuditEntry, append_audit, outcome
    from hubflow.registry import load_registry
    from hubflow.status import StatusFolder
    from hubflow.status.names import AUDIT_FILE

    folder = StatusFolder(load_registry(status_world.registry).job("never_ran").paths.status_dir)
    append_audit(
        folder,
        AuditEntry.now(
            by="carol (run manual__3)",
            action="restart",
            dry_run=True,
            reason="new config",
            outcome=outcome("done", "would start job never_ran"),
        ),
    )
    try:
        dom = run_chromium(tmp_path, "--dump-dom", page_url, budget_ms=15000).stdout
    finally:
        folder.remove(AUDIT_FILE)
    table = dom[dom.index('id="audit-never_ran"') :]
    table = table[: table.index("</table>")]
    assert "<td>restart (dry run)</td>" in table, table
    assert "<td>carol (run manual__3)</td>" in table and "<td>new config</td>" in table
