"""The proof that the team stack runs: docker-compose on images made here, driven only through
Airflow's REST API and ``docker`` (``make stack-test``; part of ``make test`` where Docker can run).

One compose project (``hubflow-proof``, its own volumes and free host ports) is brought up by
``scripts/stack.sh up`` with the proof's registry overrides (supervisor every minute, the landing job
every 2 minutes, landing folders by minute; tests/deploy/stack/). The streaming job
``telemetry_bronze`` runs a pipeline of a user's own, not a hubflow module: ``tagged_events:tagged``
(tests/support/pipelines/tagged_events.py, mounted into the image's pipelines folder by
tests/deploy/stack/compose.override.yml). Then, in order:

1. 10,000 events go to the emulator and order files (good and bad records) land in two past
   minutes' folders; the supervisor DAG starts ``telemetry_bronze`` on a Celery worker (its driver
   log names the user's module) and ``landing_orders`` runs on its schedule and archives what it
   committed. Neither Celery worker holds an Airflow secret (JWT, Fernet, database password) in any
   process's environment, the running driver's included, or in a file the job user can read.
2. A backfill of the interval holding both minutes through ``POST /api/v2/backfills`` while the
   stream runs: the records of each of its folders, from landing or archive, replace theirs in the
   job's Delta tables (one ``replaceWhere`` commit each). Then ``landing_orders`` is paused: it has
   nothing left to show, and its run every 2 minutes would only load the machine.
3. ``docker kill`` of the Celery worker that hosts the streaming driver; 10,000 more events. The
   supervisor, on the other worker, restarts the job within its interval plus the lease; a sampler
   sees at most one driver at any moment.
4. On-call ``stop`` through the API: the job stops and stays stopped across two supervisor runs;
   on-call ``start`` resumes it.
5. An injected fault: 10,000 more events, and every client connection of the emulator dropped
   (its fault API) while the stream holds one; the connector reconnects.
6. Every event once in the lake, by identity (its id in the pipeline's ``text`` column, its
   partition and sequence number), every landing record once (written or quarantined), archived
   files only of committed batches, both jobs on the status page fetched through the api-server.

``test_stack_down_leaves_nothing_behind`` then runs ``scripts/stack.sh down --volumes`` (what
``make stack-down VOLUMES=1`` runs) and checks that no container, network, volume, dockerd or
bridge of the stack is left.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.deploy.airflow_api import AirflowApi, wait_for
from tests.support.compose_stack import (
    PROOF_PROJECT,
    STATE_DIR,
    ComposeStack,
    docker,
    docker_unavailable,
    image_build_seconds,
    wait_for_image_build,
)
from tests.support.processes import free_port

pytestmark = [pytest.mark.integration, pytest.mark.stack]

PROJECT = PROOF_PROJECT
PROOF_DIR = Path(__file__).parent / "stack"
SUPERVISOR = "telemetry_bronze__supervisor"
#: The pipeline telemetry_bronze runs (tests/deploy/stack/registry-overrides.yaml): a user's module,
#: found in the image's pipelines folder ($HUBFLOW_PIPELINES_DIR), where compose.override.yml mounts it.
TELEMETRY_PIPELINE = "tagged_events:tagged"
PIPELINE_MODULE = "/opt/airflow/pipelines/tagged_events.py"
DRIVER_LOG = "/opt/hubflow/data/status/telemetry_bronze/driver.log"
LANDING_DAG = "landing_orders__available_now"
ONCALL = "telemetry_bronze__oncall"
WORKERS = ("airflow-worker-1", "airflow-worker-2")
#: Prints whether the connector in a container runs its compiled loops (pyspark_eventhubs.native).
NATIVE_LOOPS = "from pyspark_eventhubs import native; print(native.accel is not None)"
#: ``docker top``'s ps arguments: the pid column (docker top needs it) and whole command lines.
#: Without ``-ww`` ps cuts each line at the width it finds (dockerd's ``COLUMNS``, 80 in some
#: environments), and a driver's ``--pipeline tagged_events:tagged``, at the end of its line, is
#: cut off: the sampler then sees no driver at all (the failure of two fresh-clone runs).
PS_ARGS = ("-eo", "pid,args", "-ww")
#: The supervisor's interval in the proof (tests/deploy/stack/registry-overrides.yaml).
SUPERVISE_EVERY = 60.0
#: landing_orders' schedule there: one backfill interval spans two minute folders.
LANDING_EVERY = timedelta(minutes=2)
EVENTS_PER_ROUND = 10_000
LANDING = "/opt/hubflow/data/landing/orders"
#: A driver's start on a loaded 2-core machine (spark-submit, JVM, session, executors).
START_UP = 420.0
#: How long a killed driver's lease keeps the job from starting elsewhere (the proof's job config).
LEASE_SECONDS = 60.0
#: After how long Airflow fails a task whose worker died (deploy/airflow/airflow.cfg): a supervisor
#: task lost with the killed worker holds back the next supervisor run (max_active_runs=1) this long.
TASK_HEARTBEAT_TIMEOUT = 120.0


@pytest.fixture(scope="module")
def stack() -> Iterator[ComposeStack]:
    reason = docker_unavailable()
    if reason:
        pytest.skip(f"Docker cannot run here: {reason}")
    started = time.monotonic()
    built = wait_for_image_build()
    waited = time.monotonic() - started
    ports = {name: free_port() for name in ("airflow", "spark", "eventhubs", "microsoft")}
    env = {
        **os.environ,
        "COMPOSE_PROJECT_NAME": PROJECT,
        "HUBFLOW_STACK_FRESH": "1",  # nothing of an earlier run (containers, volumes) is reused
        "COMPOSE_FILE": "docker-compose.yml:tests/deploy/stack/compose.override.yml",
        "HUBFLOW_REGISTRY_OVERRIDES": "/opt/hubflow/stack-test/registry-overrides.yaml",
        "HUBFLOW_AIRFLOW_PORT": str(ports["airflow"]),
        "HUBFLOW_SPARK_MASTER_UI_PORT": str(ports["spark"]),
        "HUBFLOW_EVENTHUBS_PORT": str(ports["eventhubs"]),
        "HUBFLOW_MICROSOFT_EVENTHUBS_PORT": str(ports["microsoft"]),
    }
    proof = ComposeStack(PROJECT, env, ports)
    proof.timings["waited for the background image build"] = waited
    build = image_build_seconds()
    if build is not None:
        proof.timings["background image build (overlapping other tests)"] = build
    up_started = time.monotonic()
    result = proof.script("up", *(["--no-build"] if built else []))  # images are built once
    proof.timings["scripts/stack.sh up"] = time.monotonic() - up_started
    try:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
        yield proof
    finally:
        if os.environ.get("HUBFLOW_PROOF_KEEP") != "1":  # =1 when debugging: leave the stack up
            # test_stack_down_leaves_nothing_behind normally did this already; it is idempotent.
            down = proof.script("down", "--volumes")
            if down.returncode != 0:
                print(f"scripts/stack.sh down --volumes failed:\n{down.stdout[-2000:]}{down.stderr[-3000:]}")
        # Printed (seen with -s) and kept in .hubflow/stack/proof-timings.log (a pytest-xdist worker's
        # output is not shown when the proof passes).
        lines = [f"stack proof timing: {name}: {seconds:.0f} s" for name, seconds in proof.timings.items()]
        print("\n".join(lines))
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        (STATE_DIR / "proof-timings.log").write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def api(stack: ComposeStack) -> AirflowApi:
    """A client of the stack's API server, once Airflow is ready: the same gate as every test that
    starts Airflow (``stack.sh up`` waited for the containers' health checks; this asks Airflow)."""
    from hubflow.supervision.airflow_readiness import Service, wait_until_ready

    url = f"http://127.0.0.1:{stack.ports['airflow']}"
    wait_until_ready(url, tuple(Service), timeout=300, interval=2)
    users = stack.exec(
        "airflow-apiserver", "cat", "/opt/airflow/simple_auth_manager_passwords.json.generated"
    )
    return AirflowApi(url, "admin", json.loads(users)["admin"])


# --- what goes in ---------------------------------------------------------------------------------


def send_events(port: int, first: int, count: int) -> None:
    """``count`` events with bodies ``{"id": first..}`` through the published AMQP port (the SDK)."""
    from azure.eventhub import EventData, EventHubProducerClient

    connection = (
        f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=RootManageSharedAccessKey;"
        "SharedAccessKey=SAS_KEY_VALUE;EntityPath=telemetry;UseDevelopmentEmulator=true"
    )
    with EventHubProducerClient.from_connection_string(connection) as producer:
        batch = producer.create_batch()
        for number in range(first, first + count):
            event = EventData(json.dumps({"id": number}))
            try:
                batch.add(event)
            except ValueError:
                producer.send_batch(batch)
                batch = producer.create_batch()
                batch.add(event)
        producer.send_batch(batch)


WRITE_LANDING = """
import json, os, sys
spec = json.load(sys.stdin)
for path, lines in spec.items():
    os.makedirs(os.path.dirname(path), exist_ok=True)
    hidden = os.path.join(os.path.dirname(path), "." + os.path.basename(path))
    with open(hidden, "w") as out:
        out.write("\\n".join(lines) + "\\n")
    os.rename(hidden, path)  # appears whole, as an upload should
"""


class Landing:
    """The order files the proof puts into the landing folder, by minute folder."""

    def __init__(self) -> None:
        self.files: dict[str, list[str]] = {}
        self.good: dict[str, list[int]] = {}
        self.bad: dict[str, list[str]] = {}
        self.next_id = 1

    def add(self, stack: ComposeStack, minute: datetime, files: int = 2, good: int = 5) -> None:
        folder = f"{LANDING}/{minute:%Y/%m/%d/%H/%M}"
        spec = {}
        for index in range(files):
            name = f"{folder}/orders-{minute:%H%M}-{index}.json"
            lines = []
            for _ in range(good):
                lines.append(
                    json.dumps(
                        {
                            "order_id": self.next_id,
                            "customer": "c",
                            "amount": 1.5,
                            "created_at": minute.isoformat(),
                        }
                    )
                )
                self.good.setdefault(folder, []).append(self.next_id)
                self.next_id += 1
            broken = f"not json: {name}"
            lines.append(broken)
            self.bad.setdefault(folder, []).append(broken)
            spec[name] = lines
        stack.exec("airflow-apiserver", "python", "-c", WRITE_LANDING, stdin=json.dumps(spec))
        self.files.update(spec)

    def all_good(self) -> list[int]:
        return sorted(i for ids in self.good.values() for i in ids)

    def all_bad(self) -> list[str]:
        return sorted(line for lines in self.bad.values() for line in lines)


# --- what the stack says -------------------------------------------------------------------------


def job_snapshot(api: AirflowApi, name: str) -> dict[str, Any]:
    return next(job for job in api.status_page_jobs() if job["name"] == name)


def running_on(api: AirflowApi, sampler: DriverSampler, since: datetime | None = None) -> str | None:
    """The worker whose driver runs telemetry_bronze now (status page: running, with a heartbeat
    after ``since``; processes: where)."""
    snapshot = job_snapshot(api, "telemetry_bronze")
    if not snapshot["alive"] or snapshot["state"] not in ("running", "idle"):
        return None
    if since and datetime.fromisoformat(snapshot["heartbeat"].replace("Z", "+00:00")) <= since:
        return None  # the status of a driver that is gone, not yet judged dead
    hosts = sampler.drivers()
    return hosts[0] if len(hosts) == 1 else None


def finished_runs(api: AirflowApi, dag_id: str, since: datetime, run_type: str | None = None) -> list[dict]:
    runs = api.runs(dag_id, **({"run_type": run_type} if run_type else {}))
    return [
        run
        for run in runs
        if run["state"] in ("success", "failed")
        and datetime.fromisoformat(run["start_date"].replace("Z", "+00:00")) >= since
    ]


def failed_run_detail(api: AirflowApi, dag_id: str, run: dict[str, Any]) -> str:
    lines = [f"{dag_id} run {run['dag_run_id']} {run['state']}"]
    for task in api.task_instances(dag_id, run["dag_run_id"]):
        lines.append(f"  {task['task_id']}: {task['state']} on {task.get('hostname')}")
        if task["state"] == "failed":
            lines.append(api.task_log(dag_id, run["dag_run_id"], task["task_id"], task["try_number"])[-3000:])
    return "\n".join(lines)


class DriverSampler:
    """Counts, every ``every`` seconds, the worker containers that run a telemetry_bronze driver
    (``docker top``: the processes of a container, seen from the host; a driver's command line is
    ``spark-submit .../jobs/pipeline.py --config ... --pipeline tagged_events:tagged``)."""

    def __init__(self, stack: ComposeStack, every: float = 3.0) -> None:
        self.containers = {service: stack.container(service) for service in WORKERS}
        self.every = every
        self.most = 0
        self.samples = 0
        self.overlaps: list[str] = []
        #: Command lines of the workers' processes that held one of the stack's secrets.
        self.exposed: list[str] = []
        self._secrets = stack_secrets()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def drivers(self) -> list[str]:
        """The workers that run a telemetry_bronze driver now (a killed one runs nothing)."""
        hosts = []
        for service, container in self.containers.items():
            try:
                processes = docker("top", container, *PS_ARGS)
            except RuntimeError:
                continue  # not running
            if f"--pipeline {TELEMETRY_PIPELINE}" in processes:
                hosts.append(service)
            self.exposed.extend(f"{service}: {line[:200]}" for line in exposures(processes, self._secrets))
        return hosts

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            hosts = self.drivers()
            self.samples += 1
            self.most = max(self.most, len(hosts))
            if len(hosts) > 1:
                self.overlaps.append(f"{datetime.now(UTC).isoformat()}: drivers on {hosts}")

    def __enter__(self) -> DriverSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def stack_secrets() -> list[str]:
    """The values scripts/stack.sh generated for the proof (JWT, Fernet, database, Spark RPC)."""
    lines = (STATE_DIR / "secrets.env").read_text().splitlines()
    return [line.split("=", 1)[1] for line in lines if "=" in line and line.split("=", 1)[1]]


#: The secrets of Airflow's own in scripts/stack.sh's secrets.env: with the JWT secret a process mints
#: an admin API token, with the Fernet key it decrypts connections, with the database's password it
#: owns the metadata DB. No process that runs job code may hold one (Spark's RPC secret, which every
#: driver needs to join the cluster, is not among them).
AIRFLOW_SECRETS = ("HUBFLOW_JWT_SECRET", "HUBFLOW_FERNET_KEY", "HUBFLOW_POSTGRES_PASSWORD")

#: Run in a Celery worker's container: what hostile job code could read there. Reads the secrets'
#: values as JSON from stdin (never a command line) and prints JSON: every process (its pid and
#: command line) and the names of the secrets its environment holds, and every file under the given
#: folders that holds one (only those the user it runs as can read).
READ_WORKER = """
import json, os, stat, sys
secrets = {name: value.encode() for name, value in json.load(sys.stdin).items()}
found = {"processes": [], "files": [], "unreadable": []}
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = f.read().replace(b"\\0", b" ").decode(errors="replace").strip()
    except (FileNotFoundError, ProcessLookupError):
        continue  # ended meanwhile
    except OSError as exc:
        found["unreadable"].append(f"{pid}: {exc}")
        continue
    held = sorted(name for name, value in secrets.items() if value in environ)
    found["processes"].append({"pid": int(pid), "command": command[:300], "holds": held})
for root in sys.argv[1:]:
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            try:
                status = os.stat(path)
                if not stat.S_ISREG(status.st_mode) or status.st_size > 64 << 20:
                    continue  # FIFOs, sockets, devices, huge files
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue  # not readable: what job code cannot read either
            held = sorted(n for n, value in secrets.items() if value in data)
            if held:
                found["files"].append(f"{path}: {held}")
print("REPORT " + json.dumps(found))
"""
#: Folders a worker's job code could look in for a copy of a secret (its home and Airflow's, the
#: data volume, Spark's conf, the proof's mounts, /tmp, /etc, /run).
WORKER_FOLDERS = (
    "/opt/airflow",
    "/opt/hubflow/data",
    "/opt/hubflow/spark-conf",
    "/opt/hubflow/stack-test",
    "/tmp",
    "/etc",
    "/run",
    "/root",
)


def airflow_secrets() -> dict[str, str]:
    """Airflow's secrets of the proof's stack (:data:`AIRFLOW_SECRETS`), by name, as generated."""
    lines = (STATE_DIR / "secrets.env").read_text().splitlines()
    values = dict(line.split("=", 1) for line in lines if "=" in line)
    return {name: values[name] for name in AIRFLOW_SECRETS}


def read_worker(stack: ComposeStack, service: str) -> dict[str, Any]:
    """:data:`READ_WORKER`'s report from ``service``'s container, run as the job user: the
    environments and files job code can read. The secrets go through stdin, never into a command
    line or a traceback's arguments."""
    import subprocess

    command = ["docker", "exec", "-i", "-u", "50000:0", stack.container(service), "python", "-c", READ_WORKER]
    result = subprocess.run(
        [*command, *WORKER_FOLDERS],
        input=json.dumps(airflow_secrets()),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, (
        f"reading {service} failed (exit {result.returncode}): {result.stderr[-2000:]}"
    )
    line = next(line for line in result.stdout.splitlines() if line.startswith("REPORT "))
    return json.loads(line.removeprefix("REPORT "))


def every_environment(stack: ComposeStack, service: str) -> list[dict[str, Any]]:
    """Every process of ``service``'s container, read from the host (``docker top``'s pids, whose
    ``/proc/<pid>/environ`` root reads here): its command line and the names of the Airflow secrets
    its environment holds. Airflow 3's task supervisors make themselves non-dumpable, so that their
    own user (the job's) cannot read them; ``docker exec --privileged`` cannot run here."""
    secrets = {name: value.encode() for name, value in airflow_secrets().items()}
    found = []
    for line in docker("top", stack.container(service), *PS_ARGS).splitlines()[1:]:
        pid, _, command = line.strip().partition(" ")
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            continue  # ended meanwhile (gone, or exiting: its /proc entry is there, its memory not)
        held = sorted(name for name, value in secrets.items() if value in environ)
        found.append({"pid": int(pid), "command": command.strip()[:300], "holds": held})
    return found


def assert_no_airflow_secret_reaches_job_code(stack: ComposeStack, driver_host: str) -> None:
    """No process of either Celery worker (tini, the worker, its task processes, the running
    driver's spark-submit and Python processes) holds an Airflow secret in its environment, and no
    file the job user (50000) can read holds one. On ``driver_host`` a telemetry_bronze driver
    runs: its environment is among those read, so the check is not vacuous."""
    for service in WORKERS:
        processes = every_environment(stack, service)
        assert any("celery worker" in p["command"] for p in processes), (
            f"no Celery worker among the processes read from the host (Linux Docker only): {processes}"
        )
        exposed = [f"{p['command'][:120]}: {p['holds']}" for p in processes if p["holds"]]
        assert not exposed, f"{service}: processes holding Airflow's secrets: {exposed}"
        if service == driver_host:
            drivers = [p for p in processes if f"--pipeline {TELEMETRY_PIPELINE}" in p["command"]]
            assert drivers, f"no telemetry_bronze driver among {service}'s processes"
        # What hostile job code reads, as the job user: PID 1's environment (tini, started with the
        # container's) among every process's it can open, and the files.
        as_job = read_worker(stack, service)
        held = [f"{p['pid']} {p['command'][:120]}: {p['holds']}" for p in as_job["processes"] if p["holds"]]
        assert any(p["pid"] == 1 for p in as_job["processes"]), as_job["unreadable"][:5]
        assert not held, f"{service}: processes holding Airflow's secrets: {held}"
        assert not as_job["files"], f"{service}: files holding Airflow's secrets: {as_job['files']}"
        mounts = [m.get("Source", "") for m in stack.containers(service)[0]["Mounts"]]
        assert not [m for m in mounts if m.endswith("secrets.env") or "/.hubflow/" in m], mounts


def exposures(processes: str, secrets: list[str]) -> list[str]:
    """The lines of ``docker top`` output (whole command lines) that hold one of ``secrets``."""
    return [line for line in processes.splitlines() if any(secret in line for secret in secrets)]


def command_line_exposures(stack: ComposeStack) -> list[str]:
    """Every running container's command lines that hold one of the stack's secrets."""
    secrets = stack_secrets()
    found = []
    for container in stack.containers():
        name = container["Name"].lstrip("/")
        try:
            processes = docker("top", container["Id"], *PS_ARGS)
        except RuntimeError:
            continue  # stopped meanwhile
        found.extend(f"{name}: {line[:200]}" for line in exposures(processes, secrets))
    return found


# --- the proof ------------------------------------------------------------------------------------


@pytest.mark.timeout(3600)
def test_the_stack_survives_a_lost_worker_holds_a_stop_and_loses_nothing(
    stack: ComposeStack, api: AirflowApi
) -> None:
    try:
        prove(stack, api)
    except BaseException:
        print(diagnostics(stack, api))  # shown by pytest with the failure
        raise


def diagnostics(stack: ComposeStack, api: AirflowApi) -> str:
    """What the stack looked like when the proof failed: containers, DAG runs, jobs, driver log."""
    lines = ["--- containers"]
    try:
        for container in stack.containers(all_states=True):
            state = container["State"]
            health = (state.get("Health") or {}).get("Status", "-")
            lines.append(f"{container['Name']}: {state['Status']} {health} exit {state['ExitCode']}")
        for dag_id in (SUPERVISOR, LANDING_DAG, ONCALL):
            lines.append(f"--- {dag_id}")
            for run in api.runs(dag_id, limit=8):
                tasks = ", ".join(
                    f"{t['task_id']}={t['state']}@{t.get('hostname')}"
                    for t in api.task_instances(dag_id, run["dag_run_id"])
                )
                lines.append(f"{run['dag_run_id']} {run['run_type']} {run['state']}: {tasks}")
                if run["state"] == "failed" and len(lines) < 400:
                    lines.append(failed_run_detail(api, dag_id, run)[-2500:])
        lines.append(f"--- {LANDING_DAG} backfill runs")
        for run in api.runs(LANDING_DAG, run_type="backfill"):
            lines.append(f"{run['dag_run_id']} {run['state']} (start {run.get('start_date')})")
            for task in api.task_instances(LANDING_DAG, run["dag_run_id"]):
                lines.append(
                    f"  {task['task_id']}: {task['state']} try {task['try_number']} on {task.get('hostname')}"
                )
                # Every try's log that did not succeed: an earlier try's failure is what made the
                # run late (the first try's cause was lost once because only the last was read).
                last = task["try_number"] or 0
                tries = range(1, last + (task["state"] not in ("success", "skipped", None)))
                for try_number in tries:
                    log = api.task_log(LANDING_DAG, run["dag_run_id"], task["task_id"], try_number)
                    lines.append(f"  (try {try_number} of {task['task_id']}, end of its log)")
                    lines.append(log[-4000:])
        lines.append("--- spark master (applications: cores)")
        master = httpx.get(f"http://127.0.0.1:{stack.ports['spark']}/json/", timeout=30).json()
        lines.append(f"cores {master.get('coresused')}/{master.get('cores')}")
        for app in master.get("activeapps", []):
            lines.append(f"  {app.get('name')}: {app.get('cores')} cores, {app.get('state')}")
        lines.append("--- the workers' Spark and pipeline processes (docker top)")
        for service in WORKERS:
            try:
                top = docker("top", stack.container(service), *PS_ARGS)
            except RuntimeError as exc:
                lines.append(f"{service}: {exc}")
                continue
            mine = [line[:600] for line in top.splitlines() if "spark" in line.lower() or "pipeline" in line]
            lines.append(f"{service}: {len(mine)} processes")
            lines.extend(f"  {line}" for line in mine)
        lines.append("--- status page")
        lines.extend(json.dumps(job, default=str)[:1500] for job in api.status_page_jobs())
        lines.append("--- telemetry_bronze driver.log (end)")
        log = stack.exec("airflow-apiserver", "tail", "-n", "60", DRIVER_LOG)
        lines.append(log)
    except Exception as exc:  # the stack may be half gone: say what could not be read
        lines.append(f"(diagnostics stopped: {exc})")
    return "\n".join(lines)


def prove(stack: ComposeStack, api: AirflowApi) -> None:
    """The proof's steps (see the module docstring)."""
    timings = stack.timings
    phase = time.monotonic()
    landing = Landing()
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    # Two minute folders of one backfill interval [now - 3 min, now - 1 min), which lies before
    # every scheduled run's (the first one's ends when the DAG is unpaused).
    backfill_minutes = [now - timedelta(minutes=3), now - timedelta(minutes=2)]
    for minute in backfill_minutes:
        landing.add(stack, minute)
    send_events(stack.ports["eventhubs"], 0, EVENTS_PER_ROUND)
    for dag_id in (SUPERVISOR, LANDING_DAG, ONCALL):
        api.unpause(dag_id)
    started_at = datetime.now(UTC)

    with DriverSampler(stack) as sampler:
        # 1. The supervisor starts the stream on a worker; the landing job runs and archives. The
        # stream counts as started once it committed a batch: a driver whose query cannot start (on
        # a loaded machine Spark's Python planner may miss its connect-back window every attempt)
        # looks alive until it gives up, and the next supervisor run starts it again elsewhere.
        first_host = wait_for(
            lambda: job_snapshot(api, "telemetry_bronze")["last_batch"] and running_on(api, sampler),
            2 * SUPERVISE_EVERY + 2 * START_UP,
            "telemetry_bronze running with a committed batch",
        )
        timings["stream running after unpausing"] = time.monotonic() - phase
        # The running driver imported the user's module from the pipelines folder (jobs/pipeline.py
        # logs the function's source file when it starts).
        started_line = f"runs pipeline {TELEMETRY_PIPELINE} ({PIPELINE_MODULE})"
        driver_log = stack.exec("airflow-apiserver", "cat", DRIVER_LOG)
        assert started_line in driver_log, driver_log[-3000:]
        # The image's connector runs its compiled loops (built by the Dockerfile, compiler removed).
        assert stack.exec("spark-worker-1", "python", "-c", NATIVE_LOOPS).strip() == "True"
        # The Celery workers, where job code runs, hold none of Airflow's secrets: not the worker
        # (PID 1), not the task processes, not the running driver.
        assert_no_airflow_secret_reaches_job_code(stack, first_host)

        def landing_archived() -> bool:
            runs = finished_runs(api, LANDING_DAG, started_at, run_type="scheduled")
            failed = [r for r in runs if r["state"] == "failed"]
            assert not failed, failed_run_detail(api, LANDING_DAG, failed[0])
            remaining = stack.exec("airflow-apiserver", "find", LANDING, "-type", "f", "-name", "*.json")
            return bool(runs) and not remaining.strip()

        wait_for(
            landing_archived,
            3 * SUPERVISE_EVERY + START_UP,
            "a scheduled landing_orders run archiving every file",
        )
        timings["landing files archived"] = time.monotonic() - phase
        # The stream's driver and executor run (Spark RPC authentication on: their secret is the
        # stack's); no container shows a secret on a command line, the executors' included.
        assert not command_line_exposures(stack), command_line_exposures(stack)

        # 2. Backfill the interval of the two minutes while the stream runs: one run (Airflow's
        # to_date is inclusive: from and to the interval's logical date).
        phase = time.monotonic()
        assert backfill_minutes[-1] + timedelta(minutes=1) - backfill_minutes[0] == LANDING_EVERY
        backfill = api.create_backfill(LANDING_DAG, backfill_minutes[0], backfill_minutes[0])

        def backfill_done() -> list[dict] | None:
            runs = api.runs(LANDING_DAG, run_type="backfill")
            assert len(runs) <= 1, f"a run outside the interval: {runs}"
            finished = [r for r in runs if r["state"] in ("success", "failed")]
            failed = [r for r in finished if r["state"] == "failed"]
            assert not failed, failed_run_detail(api, LANDING_DAG, failed[0])
            return finished or None

        # A run is a driver's start-up and about as much again of batch work (read, check, replace);
        # one retry of run_job is allowed for (retry_delay 30 s): on 2026-11-27, at a load average
        # of 32-35, the backfill's first try failed and its retry was still running at 840 s (the
        # first try's cause is not known yet; a stopgap, see issue #28's session-23 note).
        backfill_runs = wait_for(backfill_done, 3 * START_UP, f"backfill {backfill['id']} of one interval")
        assert running_on(api, sampler) == first_host, "the stream stopped during the backfill"
        timings["backfill of one interval"] = time.monotonic() - phase
        # landing_orders has shown what it must (scheduled runs beside the stream, the archive, the
        # backfill): pausing it spares the rest of the proof a spark-submit every 2 minutes on 2 cores.
        api.pause(LANDING_DAG)

        # 3. Lose the worker that hosts the driver.
        phase = time.monotonic()
        victim = stack.container(first_host)
        supervisor_tasks_lost = supervisor_tasks_on(api, first_host)
        docker("kill", victim)
        killed_at, killed_when = time.monotonic(), datetime.now(UTC)
        send_events(stack.ports["eventhubs"], EVENTS_PER_ROUND, EVENTS_PER_ROUND)
        survivor = next(w for w in WORKERS if w != first_host)
        # A supervisor task that was running on the killed worker dies with it and holds back the
        # next supervisor run until Airflow fails it (its heartbeat timeout).
        lease = LEASE_SECONDS + (TASK_HEARTBEAT_TIMEOUT if supervisor_tasks_lost else 0.0)
        second_host = wait_for(
            lambda: running_on(api, sampler, since=killed_when),
            SUPERVISE_EVERY + lease + 2 * START_UP,
            f"telemetry_bronze restarted after docker kill of {victim}",
        )
        restart_seconds = time.monotonic() - killed_at
        timings["restart after docker kill"] = restart_seconds
        assert second_host == survivor
        lost = ""
        if supervisor_tasks_lost:
            lost = f" + {TASK_HEARTBEAT_TIMEOUT:.0f} s: {supervisor_tasks_lost} died with it"
        assert restart_seconds <= SUPERVISE_EVERY + lease + START_UP, (
            f"restarted {restart_seconds:.0f} s after the kill; at most the supervisor's interval "
            f"({SUPERVISE_EVERY:.0f} s) + the lease ({LEASE_SECONDS:.0f} s{lost}) + a driver's start-up "
            f"({START_UP:.0f} s)"
        )
        assert docker("inspect", "--format", "{{.State.Running}}", victim).strip() == "false"

        # 4. On-call stop holds across two supervisor runs; start resumes.
        phase = time.monotonic()
        stop_run = api.trigger(ONCALL, {"action": "stop", "dry_run": False})
        stopped = wait_for(lambda: _finished(api, ONCALL, stop_run), START_UP, "the on-call stop")
        assert stopped["state"] == "success", failed_run_detail(api, ONCALL, stopped)
        stopped_at = datetime.now(UTC)
        supervisor_runs = wait_for(
            lambda: (runs := finished_runs(api, SUPERVISOR, stopped_at)) and len(runs) >= 2 and runs,
            3 * SUPERVISE_EVERY + 120,
            "two supervisor runs after the on-call stop",
        )
        assert all(run["state"] == "success" for run in supervisor_runs), failed_run_detail(
            api, SUPERVISOR, next(r for r in supervisor_runs if r["state"] != "success")
        )
        held = job_snapshot(api, "telemetry_bronze")
        assert not held["alive"], f"the supervisor restarted a job on hold: {held}"
        assert held["state"] == "held", held
        assert sampler.drivers() == []
        timings["stop held across two supervisor runs"] = time.monotonic() - phase

        phase = time.monotonic()
        start_run = api.trigger(ONCALL, {"action": "start", "dry_run": False})
        started = wait_for(lambda: _finished(api, ONCALL, start_run), 2 * START_UP, "the on-call start")
        assert started["state"] == "success", failed_run_detail(api, ONCALL, started)
        wait_for(
            lambda: running_on(api, sampler), START_UP, "telemetry_bronze running again after on-call start"
        )
        timings["on-call start"] = time.monotonic() - phase

        # 5. An injected fault: once the stream has caught up, a third round of events, and every
        # client connection of the emulator TCP-aborted as soon as the stream holds one (its
        # receivers connect when it reads the round), as a network failure between the cluster and
        # Event Hubs would. The connector reconnects and reads on from its checkpoint.
        phase = time.monotonic()
        wait_for(lambda: caught_up(api), 2 * START_UP, "telemetry_bronze to catch up (lag 0)")
        send_events(stack.ports["eventhubs"], 2 * EVENTS_PER_ROUND, EVENTS_PER_ROUND)
        dropped = wait_for(lambda: drop_connections(stack), START_UP, "a connection of the stream to drop")
        timings[f"fault: {dropped} connection(s) dropped"] = time.monotonic() - phase
        # Every event once: wait until the lake holds as many rows as were sent, then check them.
        phase = time.monotonic()
        total = 3 * EVENTS_PER_ROUND
        report = wait_for(
            lambda: (found := verify_data(stack))["telemetry"]["rows"] >= total and found,
            2 * START_UP,
            f"the lake to hold {total} events",
            every=15.0,
        )
        timings["caught up after the fault, lake read by verify_data.py"] = time.monotonic() - phase
    assert sampler.samples > 0
    assert sampler.most <= 1, sampler.overlaps
    assert not sampler.exposed, sampler.exposed

    # Every event the proof sent exactly once, by identity: ids 0..total-1 (from the pipeline's
    # ``text``, the body sent) each in one row, and no place in the hub (partition, sequenceNumber)
    # written twice.
    telemetry = report["telemetry"]
    assert (telemetry["rows"], telemetry["distinct"], telemetry["min"], telemetry["max"]) == (
        total,
        total,
        0,
        total - 1,
    ), telemetry
    assert telemetry["no_id"] == 0, telemetry
    assert telemetry["distinct_positions"] == telemetry["rows"], telemetry
    # Every landing record once: written or quarantined, never both, never twice.
    assert report["orders_ids"] == landing.all_good()
    assert report["quarantine_raw"] == landing.all_bad()
    # The backfill replaced its interval's rows once in each table; they hold each folder's records
    # exactly.
    assert len(backfill_runs) == 1
    assert report["replacements"] == {"orders": 1, "quarantine": 1}, report["replacements"]
    for minute in backfill_minutes:
        folder = f"{LANDING}/{minute:%Y/%m/%d/%H/%M}"
        window = report["backfill"][f"{minute:%Y-%m-%dT%H:%M:%SZ}"]
        assert window == {"ids": sorted(landing.good[folder]), "raw": sorted(landing.bad[folder])}
    # Archived files: only files of committed batches, each landing file archived once.
    archived = [path.split(LANDING, 1)[1] for path in report["archive_files"]]
    committed = [path.split(LANDING, 1)[1] for path in report["checkpoint"]["committed"]]
    assert sorted(archived) == sorted(set(archived))
    assert set(archived) <= set(committed), sorted(set(archived) - set(committed))
    assert sorted(archived) == sorted(path.split(LANDING, 1)[1] for path in landing.files)
    assert report["landing_files"] == []
    # Both jobs on the status page, through the api-server (beside the registry's other jobs, which
    # the proof leaves paused).
    jobs = {job["name"]: job for job in api.status_page_jobs()}
    assert {"telemetry_bronze", "landing_orders"} <= set(jobs), sorted(jobs)
    assert jobs["telemetry_bronze"]["alive"] and jobs["telemetry_bronze"]["ok"], jobs["telemetry_bronze"]
    assert jobs["landing_orders"]["verdict"] == "healthy", jobs["landing_orders"]


def supervisor_tasks_on(api: AirflowApi, host: str) -> list[str]:
    """The supervisor's task instances running on ``host`` now (they die if it is killed)."""
    return [
        f"{run['dag_run_id']}/{task['task_id']}"
        for run in api.runs(SUPERVISOR, state="running")
        for task in api.task_instances(SUPERVISOR, run["dag_run_id"])
        if task["state"] == "running" and task.get("hostname") == host
    ]


def caught_up(api: AirflowApi) -> bool:
    """The stream runs and its last batch left nothing behind in the hub."""
    snapshot = job_snapshot(api, "telemetry_bronze")
    return bool(snapshot["alive"]) and snapshot["lag"] == 0 and snapshot["last_batch"] is not None


def _finished(api: AirflowApi, dag_id: str, run_id: str) -> dict[str, Any] | None:
    run = api.run(dag_id, run_id)
    return run if run["state"] in ("success", "failed") else None


def drop_connections(stack: ComposeStack) -> int | None:
    """TCP-abort every client connection of the stack's emulator (its admin API, on loopback inside
    its container); how many it dropped, None when it had none."""
    answer = stack.exec(
        "eventhubs",
        "curl",
        "--fail",
        "--silent",
        "-X",
        "POST",
        "http://127.0.0.1:5380/faults/drop-connections",
    )
    return json.loads(answer)["dropped"] or None


def verify_data(stack: ComposeStack) -> dict[str, Any]:
    """tests/deploy/stack/verify_data.py's report, run in the api-server's container (seconds:
    delta-rs reads the tables, no JVM starts)."""
    script = (PROOF_DIR / "verify_data.py").read_text()
    output = stack.exec("airflow-apiserver", "python", "-", stdin=script)
    line = next(line for line in output.splitlines() if line.startswith("REPORT "))
    return json.loads(line.removeprefix("REPORT "))


def test_stack_down_leaves_nothing_behind(stack: ComposeStack) -> None:
    started = time.monotonic()
    dockerd_ours = (STATE_DIR / "dockerd.pid").exists()
    # What existed before scripts/stack.sh started its dockerd (it records that, and removes the rest).
    bridges_before = _read_lines(STATE_DIR / "bridges.before")
    rules_before = _docker_rules("\n".join(_read_lines(STATE_DIR / "iptables.before")))
    result = stack.script("down", "--volumes")
    stack.timings["scripts/stack.sh down --volumes"] = time.monotonic() - started
    # The script checks with docker, before it stops a dockerd it started, that no container,
    # network or volume of the project is left, and fails naming them otherwise.
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"nothing of project {PROJECT} is left (volumes deleted)" in result.stderr
    if dockerd_ours:
        # The dockerd scripts/stack.sh started is gone, and with it everything it ran.
        assert not (STATE_DIR / "dockerd.pid").exists()
        assert not any(re.search(r"(^|/)dockerd( |$)", cmd) for cmd in _process_commands())
        docker_bridges = [name for name in _bridges() if name == "docker0" or name.startswith("br-")]
        added_bridges = [name for name in docker_bridges if name not in bridges_before]
        assert added_bridges == []
        added_rules = _docker_rules(_iptables()) - rules_before
        assert not added_rules, sorted(added_rules)
    else:
        label = f"label=com.docker.compose.project={PROJECT}"
        assert docker("ps", "-aq", "--filter", label).strip() == ""
        assert docker("network", "ls", "-q", "--filter", label).strip() == ""
        assert docker("volume", "ls", "-q", "--filter", label).strip() == ""


def _process_commands() -> list[str]:
    commands = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                commands.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip())
            except OSError:
                continue
    return commands


def _read_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _docker_rules(iptables_save: str) -> set[str]:
    """The Docker chains and rules of an ``iptables-save`` output (counters left out)."""
    return {
        re.sub(r"\[\d+:\d+\]", "", line).strip()
        for line in iptables_save.splitlines()
        if line.startswith((":", "-A")) and ("DOCKER" in line or "docker0" in line or "br-" in line)
    }


def _bridges() -> list[str]:
    return [p.name for p in Path("/sys/class/net").iterdir() if (p / "bridge").exists()]


def _iptables() -> str:
    import subprocess

    return subprocess.run(["iptables-save"], capture_output=True, text=True, check=False).stdout
