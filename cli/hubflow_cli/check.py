"""``hubflow check``: every registered job's config and every pipeline's binding, without Spark.

For each job of the registry: its application is known, its config reads and validates with that
application's model (``hubflow.registry.read_job_paths``, the check Airflow makes at run
time), its name agrees with the registry's, and for a pipeline (``application: module:function``) the
function imports, its parameters bind to the config's sources and ``params:`` fit its model
(``hubflow_jobs.pipeline.job.load_pipeline``, the check ``jobs/pipeline.py`` makes before Spark).
Each problem names the file and the key or parameter, with the valid names.

What only the job's own machine can check (its local folders exist, its secret environment variable
is set) is a warning unless ``local`` is asked for (``--local``; ``hubflow run`` always asks): the
registry's configs usually describe the deployment's machines, not the one running ``hubflow check``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

from hubflow import applications
from hubflow.config import ConfigError, load_config
from hubflow.registry import RegistryError, load_registry, read_job_paths
from hubflow.status.exit_codes import EXIT_CONFIG_ERROR, EXIT_OK
from hubflow_cli.output import mask_job_variables
from hubflow_jobs.builtins.legacy_config import LegacyConfigWarning
from hubflow_jobs.pipeline.binding import PipelineError
from hubflow_jobs.pipeline.job import load_pipeline

#: The ``application`` of a job config checked without a registry, for messages.
NO_REGISTRY = "--application"


@dataclass
class CheckResult:
    """The verdict on one job: problems make it fail, warnings are only this machine's."""

    name: str
    application: str
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)  # deprecations: shown, never a failure
    notes: list[str] = field(default_factory=list)  # what the job will not do (follow): never a failure

    def failed(self, local: bool) -> bool:
        """Whether the job has problems (with ``local``, warnings count too)."""
        return bool(self.problems or (local and self.warnings))

    def lines(self, local: bool) -> list[str]:
        """The report: ``ok``/``FAIL``/``warn`` and the job, then one indented line per finding."""
        label = "FAIL" if self.failed(local) else ("warn" if self.warnings else "ok")
        lines = [f"{label:<5} {self.name}  ({self.application})"]
        lines += [f"      {problem}" for problem in self.problems]
        lines += [f"      {'' if local else 'on this machine: '}{warning}" for warning in self.warnings]
        lines += [f"      deprecated: {notice}" for notice in self.notices]
        lines += [f"      note: {note}" for note in self.notes]
        return lines


def check_job_config(
    application: str,
    config_path: Path,
    *,
    name: str | None = None,
    registry_path: Path | None = None,
) -> CheckResult:
    """Check one job: its config with the model of ``application``, and a pipeline's function.

    ``name`` is the registry entry's name (the config's must equal it); ``registry_path`` is named in
    the message about an unknown application, which is the registry's mistake.
    """
    result = CheckResult(name or str(config_path), application)
    mask_job_variables(config_path)  # its secrets, which the pipeline's import or a run may print
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LegacyConfigWarning)
        _check_job_config(result, application, config_path, name, registry_path)
    for warning in caught:
        notice = str(warning.message)
        if issubclass(warning.category, LegacyConfigWarning) and notice not in result.notices:
            result.notices.append(notice)
    return result


def _check_job_config(
    result: CheckResult, application: str, config_path: Path, name: str | None, registry_path: Path | None
) -> None:
    model = applications.config_model(application)
    if model is None:
        where = f"registry {registry_path}: jobs[{name}].application" if registry_path else NO_REGISTRY
        result.problems.append(
            f"{where}: unknown application {application!r}; the built-in applications are "
            f"{', '.join(sorted(applications.BUILTIN_PIPELINES))}, or name a pipeline function as "
            "module:function"
        )
        return
    try:
        paths = read_job_paths(config_path, application, expected_name=name)
    except RegistryError as exc:
        result.problems.append(str(exc))
        return
    result.name = name or paths.name
    if applications.pipeline_reference(application) is not None:
        try:
            load_pipeline(application, str(config_path), check_environment=False)
        except (ConfigError, PipelineError) as exc:
            result.problems.append(f"job config {config_path}: {exc}")
            return
    try:
        load_config(config_path, model, check_environment=True)
    except ConfigError as exc:
        result.warnings.append(f"job config {config_path}: {exc}")


def check_registry(registry_path: Path, only: str | None = None) -> tuple[list[CheckResult], str | None]:
    """Check every job of the registry (or the job ``only``); the results, or the registry's own problem."""
    try:
        registry = load_registry(registry_path)
        jobs = [registry.job(only)] if only else registry.jobs
    except RegistryError as exc:
        return [], str(exc)
    results = []
    for job in jobs:
        result = check_job_config(
            job.application, job.config_path(), name=job.name, registry_path=registry_path
        )
        if job.asset_schedule is not None and not result.problems:
            result.notes += follow_notes(job.name, job.application, job.config_path())
        results.append(result)
    return results, None


def follow_notes(name: str, application: str, config_path: Path) -> list[str]:
    """What keeps the ``schedule: asset(...)`` job ``name`` from following its tables' backfilled
    hours (its ``<name>__follow`` DAG, docs/airflow.md "Downstream follows a backfilled hour")."""
    from hubflow.partitions import follow_dag_id

    if not applications.can_backfill(application):
        return [
            f"application {application} cannot backfill, so hours backfilled upstream are not replaced "
            f"in {name}'s tables (no {follow_dag_id(name)} DAG); rerun what depends on them yourself"
        ]
    if applications.pipeline_reference(application) is None:
        return []
    from hubflow_jobs.pipeline.backfill import backfill_problem
    from hubflow_jobs.pipeline.declarations import DeltaSource

    try:
        config, binding = load_pipeline(application, str(config_path), check_environment=False)
    except (ConfigError, PipelineError):
        return []  # reported as the job's problem
    problem = backfill_problem(config, binding)
    if problem:
        return [
            f"{follow_dag_id(name)} runs will fail, so backfilled hours upstream are not followed: {problem}"
        ]
    return [
        f"{config.key_as_written('sources', source, 'skip_change_commits')} is not true: the job's "
        f"incremental run fails on an upstream backfill's replacement of rows (an hour "
        f"{follow_dag_id(name)} replaces); set it to true"
        for source, declared in config.sources.items()
        if isinstance(declared, DeltaSource) and not declared.skip_change_commits
    ]


def report(results: list[CheckResult], local: bool) -> int:
    """Print each result; the exit code: 0 when none failed, 2 otherwise."""
    for result in results:
        print("\n".join(result.lines(local)))
    failed = [r.name for r in results if r.failed(local)]
    if failed:
        print(f"{len(failed)} of {len(results)} jobs have problems: {', '.join(failed)}")
        return EXIT_CONFIG_ERROR
    warned = sum(1 for r in results if r.warnings)
    summary = f"all {len(results)} jobs ok" if len(results) != 1 else "ok"
    if warned:
        summary += f"; {warned} with warnings about this machine (--local counts them as problems)"
    print(summary)
    return EXIT_OK
