"""A stand-in for a streaming job's driver, for tests of what the control plane does around it.

    python -m tests.support.fake_driver CONFIG

Reads its job's status folder and checkpoint from CONFIG (a pipeline config) and what to do from the
``BEHAVIOUR = "..."`` line of its pipeline module (``--pipeline module:function``, found in
``$HUBFLOW_PIPELINES_DIR``), so a deployed copy of an earlier version behaves as that version did:

* ``commit``: report running, write the checkpoint's next batch (``offsets/N`` and ``commits/N``,
  the first batch ``0``) and keep reporting; exit 0 on the STOP marker;
* ``hang``: report running, plan a batch (``offsets/N``) and never commit it;
* ``die``: report running, plan a batch, then exit 1;
* ``crash``: exit 1 at once, before it reports anything (a start that fails);
* ``idle_then_die``: report idle while its source's folder is empty and no batch is planned; then
  plan a batch and exit 1 naming a state schema change, as Spark fails a stateful query's first
  batch on a checkpoint whose state was kept by another schema (again at each start);
* ``idle_then_commit``: the same idle start, then ``commit``.

It writes status.json the way the real runtime does (:class:`~hubflow.status.JobStatus`, with this
process's identity), so liveness, stops and kills treat it like a driver; it takes no lease.
Every start appends ``<behaviour> <HUBFLOW_STARTING_POSITION or ->`` to ``starts.log`` in the folder
above the status root, for the tests to read.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import yaml

from hubflow.repository import PIPELINES_DIR_ENV
from hubflow.status import STOP_MARKER, JobState, JobStatus, StatusFolder
from hubflow.status.process_identity import process_fields
from hubflow.supervision.upgrades import STARTING_POSITION_ENV

#: What ``idle_then_die`` fails with: Spark's words for a state kept by another key schema.
STATE_SCHEMA_ERROR = (
    "[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does not match existing state key "
    "schema. Existing key_schema=StructType(StructField(id,LongType,true)) and new key_schema="
    "StructType(StructField(id,LongType,true),StructField(name,StringType,true))."
)


def _idle_until_data(config: dict, checkpoint: Path, folder: StatusFolder, status: JobStatus) -> None:
    """Report idle until a file lands in the first source's folder (or a batch is planned already);
    exit 0 on the STOP marker meanwhile."""
    landing = Path(next(iter(config["sources"].values()))["path"])
    planned = _next_batch(checkpoint) in _ids(checkpoint / "offsets")
    while not planned and not any(landing.iterdir()):
        if folder.exists(STOP_MARKER):
            status.update(state=JobState.STOPPED)
            sys.exit(0)
        status.update(state=JobState.IDLE)
        time.sleep(0.5)


def _ids(folder: Path) -> list[int]:
    return [int(p.name) for p in folder.iterdir() if p.name.isdigit()] if folder.is_dir() else []


def _behaviour(module: str) -> str:
    folder = Path(os.environ[PIPELINES_DIR_ENV])
    text = (folder / f"{module}.py").read_text(encoding="utf-8")
    found = re.search(r'^BEHAVIOUR = "(\w+)"', text, re.M)
    return found.group(1) if found else "commit"


def _next_batch(checkpoint: Path) -> int:
    offsets = checkpoint / "offsets"
    ids = [int(p.name) for p in offsets.iterdir() if p.name.isdigit()] if offsets.is_dir() else []
    commits = checkpoint / "commits"
    done = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.is_dir() else []
    if ids and (not done or max(done) < max(ids)):
        return max(ids)  # a planned batch is run again, as Spark does
    return max(ids) + 1 if ids else 0


def main() -> int:
    args = sys.argv[1:]
    config_path = Path(args[args.index("--config") + 1])
    module = args[args.index("--pipeline") + 1].split(":")[0]
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    name = config["name"]
    checkpoint = Path(config["checkpoint_root"]) / name
    folder = StatusFolder(str(Path(config["status_root"]) / name))
    behaviour = _behaviour(module)
    with (Path(config["status_root"]).parent / "starts.log").open("a", encoding="utf-8") as log:
        log.write(f"{behaviour} {os.environ.get(STARTING_POSITION_ENV, '-')}\n")
    if behaviour == "crash":
        print("RuntimeError: this version cannot start", flush=True)
        return 1
    status = JobStatus(folder, name)
    status.update(state=JobState.RUNNING, **process_fields(os.getpid()))
    if behaviour in ("idle_then_die", "idle_then_commit"):
        _idle_until_data(config, checkpoint, folder, status)
    batch = _next_batch(checkpoint)
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch)).write_text(f'v1\n{{}}\n{{"logOffset":{batch}}}', encoding="utf-8")
    if behaviour == "die":
        time.sleep(0.5)
        status.update(state=JobState.FAILED, exception="RuntimeError: this version is broken")
        print("RuntimeError: this version is broken", flush=True)
        return 1
    if behaviour == "idle_then_die":
        time.sleep(0.5)
        status.update(state=JobState.FAILED, exception=STATE_SCHEMA_ERROR)
        print(STATE_SCHEMA_ERROR, flush=True)
        return 1
    if behaviour in ("commit", "idle_then_commit"):
        (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
        (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}', encoding="utf-8")
    while not folder.exists(STOP_MARKER):
        status.update(state=JobState.RUNNING)
        time.sleep(0.5)
    status.update(state=JobState.STOPPED)
    return 0


if __name__ == "__main__":
    sys.exit(main())
