"""``hubflow new pipeline NAME``: a working pipeline to start from, registered.

Writes ``<dir>/NAME.py`` (the function), ``<dir>/configs/NAME.yaml`` (its config, local paths under
``<dir>/../data``), ``<dir>/tests/test_NAME.py`` (its unit test; ``<dir>/tests/conftest.py`` with
the local SparkSession once) and appends the job's entry to the registry as text, so the registry's
comments stay. ``<dir>`` is the pipelines folder hubflow imports from (``$HUBFLOW_PIPELINES_DIR``,
else the repository's ``pipelines/``) unless ``--dir`` names another.

Refused, with nothing written: a name hubflow cannot use (``^[a-z][a-z0-9_]*$``, not a Python keyword,
not a module Python imports already), a name the registry has, a file that exists (unless ``force``).
"""

from __future__ import annotations

import importlib.util
import keyword
import os
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from hubflow.config import JOB_NAME_PATTERN
from hubflow.registry import RegistryError, jobs_folder, load_registry, registry_path
from hubflow.repository import PIPELINES_DIR_ENV, pipelines_folder
from hubflow.status.exit_codes import EXIT_CONFIG_ERROR, EXIT_OK
from hubflow_cli import repo_root, scaffold

_ITEM = re.compile(r"^(\s*)- ", re.MULTILINE)
_EMPTY_JOBS = re.compile(r"^jobs:[ \t]*\[\][ \t]*(#.*)?$", re.MULTILINE)


class RefusedError(Exception):
    """The pipeline cannot be created as asked; the message says why and what to do instead."""


@dataclass(frozen=True)
class Plan:
    """Where each file of a new pipeline goes."""

    name: str
    kind: str
    folder: Path
    data: Path
    registry: Path
    #: A real-time streaming pipeline (``--trigger realtime``), else a scheduled availableNow one.
    real_time: bool = False

    @property
    def module(self) -> Path:
        return self.folder / f"{self.name}.py"

    @property
    def config(self) -> Path:
        return self.folder / "configs" / f"{self.name}.yaml"

    @property
    def test(self) -> Path:
        return self.folder / "tests" / f"test_{self.name}.py"

    @property
    def conftest(self) -> Path:
        return self.folder / "tests" / "conftest.py"

    def registry_config(self) -> str:
        """The entry's ``config``: relative to the jobs folder inside the repository, else absolute."""
        config = self.config.resolve()
        if repo_root() in config.parents:
            return os.path.relpath(config, jobs_folder().resolve())
        return str(config)


def plan_pipeline(
    name: str,
    kind: str,
    *,
    folder: Path | None = None,
    data: Path | None = None,
    registry: Path | None = None,
    force: bool = False,
    real_time: bool = False,
) -> Plan:
    """Where the pipeline's files go; :class:`RefusedError` when it must not be created."""
    if real_time and kind != scaffold.REAL_TIME_KIND:
        raise RefusedError(
            f"--trigger realtime reads --source-kind {scaffold.REAL_TIME_KIND} only (Spark's real-time "
            f"mode runs its Kafka source), not {kind}; leave --source-kind out or use "
            f"--trigger available-now"
        )
    if not re.match(JOB_NAME_PATTERN, name):
        raise RefusedError(
            f"pipeline name {name!r} must match {JOB_NAME_PATTERN} (lower case letters, digits, _; "
            "a letter first): it is the module name, the job name and its checkpoint folder"
        )
    if keyword.iskeyword(name):
        raise RefusedError(f"pipeline name {name!r} is a Python keyword; choose another name")
    folder = (folder or pipelines_folder()).resolve()
    plan = Plan(
        name=name,
        kind=kind,
        folder=folder,
        data=(data or folder.parent / "data").resolve(),
        registry=(registry or registry_path()).resolve(),
        real_time=real_time,
    )
    if not plan.module.exists() and importlib.util.find_spec(name) is not None:
        raise RefusedError(
            f"pipeline name {name!r} is the name of a module Python imports already "
            f"({importlib.util.find_spec(name).origin}); a pipeline of that name would shadow it. "
            "Choose another name"
        )
    if plan.registry.exists():
        try:
            registered = [job.name for job in load_registry(plan.registry).jobs]
        except RegistryError as exc:
            raise RefusedError(f"{exc}; fix the registry first") from None
        if name in registered:
            raise RefusedError(
                f"job registry {plan.registry} has a job named {name!r} already; choose another name "
                "or remove that entry"
            )
    existing = [str(path) for path in (plan.module, plan.config, plan.test) if path.exists()]
    if existing and not force:
        raise RefusedError(f"{', '.join(existing)} exist(s) already; choose another name or pass --force")
    return plan


def write_pipeline(plan: Plan) -> list[Path]:
    """Write the plan's files and append its registry entry; the paths written."""
    written = []
    files = {
        plan.module: scaffold.module_text(plan.name, plan.kind, plan.real_time),
        plan.config: scaffold.config_text(plan.name, plan.kind, str(plan.data), plan.real_time),
        plan.test: scaffold.unit_test_text(plan.name, plan.kind, plan.real_time),
    }
    if not plan.conftest.exists():
        files[plan.conftest] = scaffold.CONFTEST
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    if plan.kind == "files":
        Path(scaffold.landing_folder(str(plan.data), plan.name)).mkdir(parents=True, exist_ok=True)
    append_registry_entry(plan.registry, plan.name, plan.registry_config(), plan.real_time)
    written.append(plan.registry)
    return written


def append_registry_entry(path: Path, name: str, config: str, real_time: bool = False) -> None:
    """Append the job's entry to the registry's ``jobs:`` list, as text (comments stay).

    The list must be the file's last key, as in dags/registry.yaml; the result is read back with
    the registry's own model, and the file restored when it does not hold the new job.
    """
    before = path.read_text(encoding="utf-8") if path.exists() else None
    text = before if before is not None else "# The job registry (docs/airflow.md).\njobs:\n"
    data = yaml.safe_load(text) or {}
    if not isinstance(data, dict):
        raise RefusedError(f"job registry {path} is not a mapping with a `jobs:` list")
    if not data.get("jobs"):
        text = _EMPTY_JOBS.sub("jobs:", text) if _EMPTY_JOBS.search(text) else text
        if "jobs" not in data:
            text = text.rstrip("\n") + "\njobs:\n"
    items = _ITEM.findall(text)
    indent = items[0] if items else "  "
    if not text.endswith("\n"):
        text += "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + scaffold.registry_entry(name, config, indent, real_time), encoding="utf-8")
    try:
        load_registry(path).job(name)
    except RegistryError as exc:
        if before is None:
            path.unlink()
        else:
            path.write_text(before, encoding="utf-8")
        raise RefusedError(
            f"could not append the entry of {name!r} to {path} ({exc}); the file is unchanged. Is `jobs:` "
            "its last key? Add the entry by hand (see docs/cli.md)"
        ) from None


def next_steps(plan: Plan, default_registry: bool) -> list[str]:
    """The commands to run next, with the options this plan needs."""
    env = "" if plan.folder == pipelines_folder().resolve() else f"{PIPELINES_DIR_ENV}={plan.folder} "
    registry = "" if default_registry else f" --registry {plan.registry}"
    steps = []
    if plan.kind == "files":
        steps.append(f"# drop JSON-lines files into {scaffold.landing_folder(str(plan.data), plan.name)}")
    elif plan.kind in ("eventhubs", "eventhubs_kafka"):
        steps.append(f"export {scaffold.connection_variable(plan.name)}='Endpoint=sb://...'")
        if plan.real_time:
            output = scaffold.connection_variable(f"{plan.name}_{scaffold.SINK}")
            steps.append(f"export {output}='Endpoint=sb://...'  # the output hub")
        if plan.kind == "eventhubs_kafka":
            steps.append(
                f"# against the emulator: uncomment kafka_bootstrap_servers in {plan.config} and set it to "
                "the address the emulator prints"
            )
    else:
        table = scaffold.TABLE_KINDS[plan.kind]
        steps.append(f"# point sources.upstream.path of {plan.config} at {table}")
    run = (
        f"{env}hubflow run {plan.name}{registry}  # runs until stopped"
        if plan.real_time
        else (f"{env}hubflow run {plan.name} --once{registry}")
    )
    steps += [f"{env}hubflow check{registry}", f"pytest {plan.test}", run]
    return steps


def new_pipeline(
    name: str,
    kind: str | None,
    *,
    folder: Path | None,
    data: Path | None,
    registry: Path | None,
    force: bool,
    trigger: str = "available-now",
) -> int:
    """The ``hubflow new pipeline`` command: the exit code (2 when refused). ``kind`` None: files, or
    eventhubs_kafka for ``trigger`` realtime."""
    real_time = trigger == "realtime"
    kind = kind or (scaffold.REAL_TIME_KIND if real_time else "files")
    try:
        plan = plan_pipeline(
            name, kind, folder=folder, data=data, registry=registry, force=force, real_time=real_time
        )
        written = write_pipeline(plan)
    except RefusedError as exc:
        print(f"hubflow new pipeline: {exc}")
        return EXIT_CONFIG_ERROR
    sink = "one Event Hubs sink, real-time mode" if real_time else "one Delta sink"
    print(f"created pipeline {name} ({kind} source, {sink}):")
    for path in written:
        what = "appended the job's entry to" if path == plan.registry else "wrote"
        print(f"  {what} {path}")
    print("next:")
    for step in next_steps(plan, default_registry=registry is None):
        print(f"  {step}")
    return EXIT_OK
