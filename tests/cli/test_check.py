"""``hubflow check``: each kind of mistake named with its file and the valid names, exit 2; else exit 0.

Every test runs the installed executable (``.venv/bin/hubflow``) on files in a temporary folder; no
Spark starts.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.cli.helpers import add_pipeline, hubflow, output, pipeline_config, write_registry
from tests.jobs.helpers import landing_config, write_config


def _job_lines(text: str, name: str) -> str:
    """The report's lines of job ``name``: its label line and the indented lines under it."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[1:2] == [name])
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith("      "):
            break
        block.append(line)
    return "\n".join(block)


def test_a_good_registry_passes(tmp_path: Path) -> None:
    builtin = write_config(tmp_path / "files_to_lake.yaml", landing_config(tmp_path / "builtin"))
    registry = write_registry(
        tmp_path / "registry.yaml",
        [
            add_pipeline(tmp_path, "good"),
            {
                "name": "files_to_lake",
                "application": "files_to_lake",
                "config": str(builtin),
                "mode": "streaming",
            },
        ],
    )

    result = hubflow("check", "--registry", registry, pipelines=tmp_path / "pipelines")

    assert result.returncode == 0, output(result)
    assert "ok    good  (good:transform)" in result.stdout
    assert "ok    files_to_lake  (files_to_lake)" in result.stdout
    assert "all 2 jobs ok" in result.stdout


def test_each_mistake_is_named_with_its_file(tmp_path: Path) -> None:
    pipelines = tmp_path / "pipelines"
    jobs = [
        add_pipeline(tmp_path, "good"),
        add_pipeline(tmp_path, "misspelt", module="def transform(ordres, params):\n    return ordres\n"),
        add_pipeline(tmp_path, "absent", module=None),
        add_pipeline(tmp_path, "explodes", module="raise RuntimeError('no database here')\n"),
        add_pipeline(
            tmp_path,
            "wrong_kind",
            sources={"orders": {"kind": "kafka", "path": str(tmp_path), "format": "json"}},
        ),
        add_pipeline(tmp_path, "bad_params", params={"threshold": "hot"}),
        add_pipeline(tmp_path, "unknown_app", application="file_to_lake"),
    ]
    registry = write_registry(tmp_path / "registry.yaml", jobs)

    result = hubflow("check", "--registry", registry, pipelines=pipelines)

    text = output(result)
    assert result.returncode == 2, text
    configs = {job["name"]: job["config"] for job in jobs}
    assert _job_lines(text, "good").startswith("ok    good")

    misspelt = _job_lines(text, "misspelt")
    assert misspelt.startswith("FAIL  misspelt")
    assert configs["misspelt"] in misspelt
    valid = "valid names: orders, params, spark, context"
    assert f"parameter 'ordres' names no source of the config; {valid}" in misspelt

    absent = _job_lines(text, "absent")
    assert configs["absent"] in absent
    assert f"no module 'absent' in {pipelines}" in absent
    assert str(pipelines / "absent.py") in absent

    explodes = _job_lines(text, "explodes")
    assert configs["explodes"] in explodes
    assert "importing its module failed" in explodes
    assert str(pipelines / "explodes.py") in explodes
    assert "RuntimeError: no database here" in explodes

    wrong_kind = _job_lines(text, "wrong_kind")
    assert configs["wrong_kind"] in wrong_kind
    assert "sources.orders" in wrong_kind and "'kafka'" in wrong_kind
    assert all(kind in wrong_kind for kind in ("'eventhubs'", "'files'", "'delta'"))

    bad_params = _job_lines(text, "bad_params")
    assert configs["bad_params"] in bad_params
    assert "params do not fit Params: params.threshold:" in bad_params

    unknown_app = _job_lines(text, "unknown_app")
    assert f"registry {registry}: jobs[unknown_app].application: unknown application 'file_to_lake'" in (
        unknown_app
    )
    assert "files_to_lake" in unknown_app.split("built-in applications are", 1)[1]

    assert "6 of 7 jobs have problems" in text


def test_one_config_without_a_registry(tmp_path: Path) -> None:
    pipelines = tmp_path / "pipelines"
    good = Path(add_pipeline(tmp_path, "solo")["config"])
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(pipeline_config(tmp_path, "solo", params={})), encoding="utf-8")

    passed = hubflow("check", "--config", good, "--pipeline", "solo:transform", pipelines=pipelines)
    failed = hubflow("check", "--config", bad, "--pipeline", "solo:transform", pipelines=pipelines)

    assert passed.returncode == 0, output(passed)
    assert failed.returncode == 2, output(failed)
    assert f"job config {bad}" in failed.stdout and "params.threshold: Field required" in failed.stdout


def test_what_only_this_machine_can_check_is_a_warning_unless_local(tmp_path: Path) -> None:
    entry = add_pipeline(tmp_path, "elsewhere")
    config = Path(entry["config"])
    data = yaml.safe_load(config.read_text(encoding="utf-8"))
    data["sources"]["orders"]["path"] = str(tmp_path / "not-here")
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    registry = write_registry(tmp_path / "registry.yaml", [entry])

    relaxed = hubflow("check", "--registry", registry, pipelines=tmp_path / "pipelines")
    local = hubflow("check", "--registry", registry, "--local", pipelines=tmp_path / "pipelines")

    assert relaxed.returncode == 0, output(relaxed)
    assert "warn  elsewhere" in relaxed.stdout
    assert f"on this machine: job config {config}" in relaxed.stdout
    assert f"landing folder {tmp_path / 'not-here'} does not exist" in relaxed.stdout
    assert local.returncode == 2, output(local)
    assert "FAIL  elsewhere" in local.stdout


def test_the_upgrade_keys_are_checked_by_their_names(tmp_path: Path) -> None:
    """docs/operations.md "Upgrades": a wrong mode, and fresh without its position, named by key."""
    good = add_pipeline(tmp_path, "good")
    for keys, said in (
        (
            {"upgrade_mode": "blue-green"},
            "jobs[good].upgrade_mode: Input should be 'last-state', 'stateless' or 'fresh'",
        ),
        ({"upgrade_mode": "fresh"}, "upgrade_mode fresh starts a new checkpoint from a position you give"),
        ({"ready_within": "soon"}, "jobs[good].ready_within: "),
    ):
        registry = write_registry(tmp_path / "registry.yaml", [{**good, **keys}])
        result = hubflow("check", "--registry", registry, pipelines=tmp_path / "pipelines")
        assert result.returncode == 2 and said in output(result), output(result)
    registry = write_registry(
        tmp_path / "registry.yaml", [{**good, "upgrade_mode": "fresh", "upgrade_from": "latest"}]
    )
    result = hubflow("check", "--registry", registry, pipelines=tmp_path / "pipelines")
    assert result.returncode == 0, output(result)


def test_finish_within_is_checked_by_its_name(tmp_path: Path) -> None:
    """docs/airflow.md's ``finish_within``: not a duration, on a streaming job, with nobody to page."""
    good = {**add_pipeline(tmp_path, "good"), "mode": "scheduled", "schedule": "@hourly"}
    alerts = {"notifiers": [{"smtp": {"to": "oncall@example.com"}}]}
    for keys, said in (
        (
            {"finish_within": "soon", "alerts": alerts},
            "jobs[good].finish_within: Value error, 'soon' is not a",
        ),
        (
            {"finish_within": "-45m", "alerts": alerts},
            "jobs[good].finish_within: Value error, '-45m' is negative",
        ),
        (
            {"finish_within": "45m", "alerts": alerts, "mode": "streaming", "schedule": None},
            "finish_within is for scheduled jobs",
        ),
        ({"finish_within": "45m"}, "finish_within pages through the job's alerts.notifiers"),
    ):
        registry = write_registry(tmp_path / "registry.yaml", [{**good, **keys}])
        result = hubflow("check", "--registry", registry, pipelines=tmp_path / "pipelines")
        assert result.returncode == 2 and said in output(result), output(result)
    registry = write_registry(
        tmp_path / "registry.yaml", [{**good, "finish_within": "45m", "alerts": alerts}]
    )
    result = hubflow("check", "--registry", registry, pipelines=tmp_path / "pipelines")
    assert result.returncode == 0, output(result)


def test_a_config_naming_airflows_or_the_platforms_secrets_fails_by_its_key(tmp_path: Path) -> None:
    """docs/pipelines.md "Secrets": a ``*_env`` key may not name Airflow's variables (the JWT secret,
    the database URL) or the platform's secrets; ``hubflow check`` names the key as written."""
    sources = {"orders": {"kind": "eventhubs", "connection_string_env": "AIRFLOW__API_AUTH__JWT_SECRET"}}
    entry = add_pipeline(tmp_path, "greedy", sources=sources)
    registry = write_registry(tmp_path / "registry.yaml", [entry])

    result = hubflow("check", "--registry", registry, pipelines=tmp_path / "pipelines")

    assert result.returncode == 2, output(result)
    greedy = _job_lines(result.stdout, "greedy")
    assert (
        f"job config {entry['config']}: jobs config error: sources.orders.connection_string_env: "
        "AIRFLOW__API_AUTH__JWT_SECRET is one of Airflow's variables, which no job may read"
    ) in greedy, greedy
    assert "export the value the job needs under a name of your own and name that" in greedy


def test_a_job_on_tables_that_cannot_follow_a_backfilled_hour_gets_a_note_naming_the_key(
    tmp_path: Path,
) -> None:
    """``schedule: asset(...)``: the shipped telemetry_silver follows (no note); the same without
    ``skip_change_commits`` would fail its incremental run on the upstream's replacement, and a job
    that cannot backfill has no ``__follow`` DAG: each a note, never a failure."""
    from tests.jobs.helpers import JOBS_DIR
    from tests.jobs.test_lake_to_eventhubs import NAME as PUBLISHER
    from tests.jobs.test_lake_to_eventhubs import publisher_config

    shipped = (JOBS_DIR / "configs" / "telemetry_silver.yaml").read_text(encoding="utf-8")
    shipped = shipped.replace("/opt/hubflow/data", str(tmp_path))
    assert "    skip_change_commits: true" in shipped
    silver = tmp_path / "telemetry_silver.yaml"
    silver.write_text(shipped, encoding="utf-8")
    skipless = tmp_path / "skipless.yaml"
    skipless.write_text(
        shipped.replace("name: telemetry_silver", "name: skipless").replace(
            "    skip_change_commits: true", "    skip_change_commits: false"
        ),
        encoding="utf-8",
    )
    publisher = write_config(tmp_path / "publisher.yaml", publisher_config(tmp_path, tmp_path / "orders"))
    on_bronze = {"mode": "scheduled", "schedule": "asset(telemetry_bronze)"}
    registry = write_registry(
        tmp_path / "registry.yaml",
        [
            {
                "name": "telemetry_silver",
                "application": "bronze_to_silver",
                "config": str(silver),
                **on_bronze,
            },
            {"name": "skipless", "application": "bronze_to_silver", "config": str(skipless), **on_bronze},
            {"name": PUBLISHER, "application": "lake_to_eventhubs", "config": str(publisher), **on_bronze},
        ],
    )

    result = hubflow("check", "--registry", registry)

    assert result.returncode == 0, output(result)
    assert "note:" not in _job_lines(result.stdout, "telemetry_silver"), result.stdout
    assert (
        "note: sources.bronze.skip_change_commits is not true: the job's incremental run fails on an "
        "upstream backfill's replacement"
    ) in _job_lines(result.stdout, "skipless")
    assert (
        f"note: application lake_to_eventhubs cannot backfill, so hours backfilled upstream are not "
        f"replaced in {PUBLISHER}'s tables (no {PUBLISHER}__follow DAG)"
    ) in _job_lines(result.stdout, PUBLISHER)


def test_a_job_on_a_parquet_table_without_interval_column_gets_a_note_naming_the_key(tmp_path: Path) -> None:
    """``schedule: asset(...)`` on a parquet table: a pipeline whose ``kind: parquet`` source names no
    ``interval_column`` cannot follow its backfilled hours (a note naming the key); with one it can."""
    table = tmp_path / "lake" / "orders_parquet"
    table.mkdir(parents=True)
    on_table = {"schedule": "asset(orders_parquet)"}
    jobs = []
    for name, column in (("unset", {}), ("timed", {"interval_column": "at"})):
        source = {"kind": "parquet", "path": str(table), "schema": "id BIGINT, at TIMESTAMP", **column}
        jobs.append({**add_pipeline(tmp_path, name, sources={"orders": source}), **on_table})
    registry = write_registry(tmp_path / "registry.yaml", jobs)

    result = hubflow("check", "--registry", registry, pipelines=tmp_path / "pipelines")

    assert result.returncode == 0, output(result)
    assert (
        "note: unset__follow runs will fail, so backfilled hours upstream are not followed: job unset: "
        "sources.orders.interval_column is not set, so a backfill cannot tell which of the table's rows "
        "belong to an interval"
    ) in " ".join(_job_lines(result.stdout, "unset").split()), result.stdout
    assert "note:" not in _job_lines(result.stdout, "timed"), result.stdout
