"""The job registry: one file, validated, errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hubflow.invocation import JobInvocation, job_conf
from hubflow.registry import RegistryError, load_registry, read_job_paths


def _write(path: Path, data: object) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _config(tmp_path: Path, name: str = "orders") -> Path:
    """A valid files_to_lake config named ``name`` (its folders need not exist where Airflow reads it)."""
    return _write(
        tmp_path / f"{name}.yaml",
        {
            "name": name,
            "trigger": {"availableNow": True},
            "checkpoint_root": "/lake/checkpoints",
            "status_root": "/lake/status",
            "source": {
                "path": "/landing/orders",
                "archive_dir": "/archive",
                "format": "json",
                "schema": "id INT",
            },
            "sink": {"output_path": "/lake/orders", "quarantine_path": "/lake/orders_bad"},
        },
    )


def test_registry_entries_and_defaults(tmp_path: Path) -> None:
    config = _config(tmp_path)
    registry = load_registry(
        _write(
            tmp_path / "registry.yaml",
            {
                "defaults": {"spark_conn_id": "spark_cluster"},
                "jobs": [
                    {
                        "name": "orders",
                        "application": "files_to_lake",
                        "config": str(config),
                        "mode": "scheduled",
                        "schedule": "@hourly",
                        "archive": True,
                    },
                ],
            },
        )
    )
    job = registry.job("orders")
    assert job.spark_conn_id == "spark_cluster"
    assert job.paths.checkpoint_location == "/lake/checkpoints/orders"
    assert job.paths.status_dir == "/lake/status/orders"
    # Spark's cleanSource=archive keeps the landing file's absolute path under the archive dir.
    assert job.paths.archive_root == "/archive/landing/orders"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"name": "Orders", "application": "a", "config": "c", "mode": "scheduled", "schedule": "@daily"},
            "jobs[Orders].name",
        ),
        ({"name": "orders", "application": "a", "config": "c", "mode": "sometimes"}, "jobs[orders].mode"),
        (
            {"name": "orders", "application": "a", "config": "c", "mode": "streaming", "colour": "red"},
            "jobs[orders].colour: unknown key",
        ),
        (
            {
                "name": "orders",
                "application": "a",
                "config": "c",
                "mode": "streaming",
                "stalled_after": "soon",
            },
            "jobs[orders].stalled_after",
        ),
        (
            {"name": "orders", "application": "a", "config": "c", "mode": "scheduled"},
            "jobs[orders].schedule is required",
        ),
    ],
)
def test_registry_errors_name_the_key(tmp_path: Path, entry: dict, message: str) -> None:
    with pytest.raises(RegistryError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_registry(_write(tmp_path / "registry.yaml", {"jobs": [entry]}))


def test_duplicate_job_names_are_refused(tmp_path: Path) -> None:
    entry = {"name": "orders", "application": "a", "config": "c", "mode": "streaming"}
    with pytest.raises(RegistryError, match="repeated: \\['orders'\\]"):
        load_registry(_write(tmp_path / "registry.yaml", {"jobs": [entry, entry]}))


def test_unknown_job_lists_the_registered_ones(tmp_path: Path) -> None:
    entry = {"name": "orders", "application": "a", "config": "c", "mode": "streaming"}
    registry = load_registry(_write(tmp_path / "registry.yaml", {"jobs": [entry]}))
    with pytest.raises(RegistryError, match=r"no job named 'payments'.*orders"):
        registry.job("payments")


def test_job_config_name_must_match_the_registry(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="has name 'orders' but the registry entry is 'payments'"):
        read_job_paths(_config(tmp_path), "files_to_lake", expected_name="payments")


def test_the_shipped_registry_is_valid() -> None:
    registry = load_registry()
    assert registry.jobs, "dags/registry.yaml registers no job"
    for job in registry.jobs:
        assert job.application_path().exists(), job.application
        assert job.paths.name == job.name


def test_delta_sinks_and_their_writers_come_from_the_job_config(tmp_path: Path) -> None:
    base = {"trigger": {"availableNow": True}, "checkpoint_root": "/c", "status_root": "/s"}
    sink = {"output_path": "/lake/out", "quarantine_path": "/lake/bad"}
    landing = {"path": "/landing", "archive_dir": "/archive", "format": "json", "schema": "id INT"}
    files = _write(tmp_path / "files.yaml", {"name": "files", **base, "source": landing, "sink": sink})
    paths = read_job_paths(files, "files_to_lake")
    assert [(s.table, s.checkpoint) for s in paths.delta_sinks] == [
        ("/lake/out", "/c/files"),
        ("/lake/bad", "/c/files"),
    ]
    hub = {"connection_string_env": "NOT_SET_WHERE_AIRFLOW_READS_IT"}
    aggregation = {
        "body_schema": "device STRING, ts TIMESTAMP, temp DOUBLE",
        "event_time_field": "ts",
        "key_field": "device",
        "value_field": "temp",
        "window": "1 minute",
        "watermark": "30 seconds",
    }
    aggregate = _write(
        tmp_path / "agg.yaml",
        {"name": "agg", **base, "source": hub, "aggregation": aggregation, "sink": sink},
    )
    assert [
        (s.table, s.checkpoint) for s in read_job_paths(aggregate, "eventhubs_aggregate").delta_sinks
    ] == [
        ("/lake/out", "/c/agg"),
        ("/lake/bad", "/lake/bad/_checkpoint"),
    ]
    parquet = _write(
        tmp_path / "pq.yaml", {"name": "pq", **base, "source": landing, "sink": {**sink, "format": "parquet"}}
    )
    parquet_paths = read_job_paths(parquet, "files_to_lake")
    assert parquet_paths.delta_tables == [] and parquet_paths.parquet_outputs == ["/lake/out", "/lake/bad"]
    assert paths.parquet_outputs == [], "a Delta job has no parquet output"


def _entry(config: Path, **keys: object) -> dict:
    return {
        "name": "orders",
        "application": "files_to_lake",
        "config": str(config),
        "mode": "scheduled",
        "schedule": "@hourly",
        **keys,
    }


def test_every_job_is_capped_in_cores(tmp_path: Path) -> None:
    """spark.cores.max goes to spark-submit for every job: 2 unless the entry says cores_max."""
    config = _config(tmp_path)
    default = load_registry(_write(tmp_path / "a.yaml", {"jobs": [_entry(config)]})).job("orders")
    assert job_conf(default) == {"spark.app.name": "orders", "spark.cores.max": "2"}
    small = load_registry(
        _write(tmp_path / "b.yaml", {"jobs": [_entry(config, cores_max=1, spark_conf={"spark.x": "y"})]})
    ).job("orders")
    assert job_conf(small) == {"spark.app.name": "orders", "spark.cores.max": "1", "spark.x": "y"}
    with pytest.raises(RegistryError, match=r"jobs\[orders\]\.cores_max"):
        load_registry(_write(tmp_path / "c.yaml", {"jobs": [_entry(config, cores_max=0)]}))
    with pytest.raises(RegistryError, match=r"jobs\[orders\]\.spark_conf: .*cores_max"):
        load_registry(
            _write(tmp_path / "d.yaml", {"jobs": [_entry(config, spark_conf={"spark.cores.max": "8"})]})
        )


def test_spark_submit_gets_the_core_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hubflow_plugins.hooks.spark_submit import build_submit_hook

    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "spark://master", "port": 7077}'
    )
    job = load_registry(_write(tmp_path / "r.yaml", {"jobs": [_entry(_config(tmp_path), cores_max=3)]})).job(
        "orders"
    )
    command = build_submit_hook(job, JobInvocation.run(job)).command()
    pairs = [command[i + 1] for i, part in enumerate(command) if part == "--conf"]
    assert "spark.cores.max=3" in pairs and "spark.app.name=orders" in pairs
    assert command[command.index("--master") + 1] == "spark://master:7077"


def test_registry_overrides_change_keys_without_editing_the_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(tmp_path)
    registry = _write(tmp_path / "registry.yaml", {"jobs": [_entry(config)]})
    overrides = _write(
        tmp_path / "overrides.yaml", {"jobs": {"orders": {"schedule": "1 minute", "cores_max": 1}}}
    )
    monkeypatch.setenv("HUBFLOW_REGISTRY_OVERRIDES", str(overrides))
    job = load_registry(registry).job("orders")
    assert (job.schedule, job.cores_max, job.archive) == ("1 minute", 1, False)
    monkeypatch.delenv("HUBFLOW_REGISTRY_OVERRIDES")
    assert load_registry(registry).job("orders").schedule == "@hourly"

    unknown = _write(tmp_path / "unknown.yaml", {"jobs": {"payments": {"schedule": "1 minute"}}})
    with pytest.raises(
        RegistryError, match=r"unknown.yaml: no job named 'payments'; registered jobs: orders"
    ):
        load_registry(registry, overrides=unknown)
    bad = _write(tmp_path / "bad.yaml", {"jobs": {"orders": {"stalled_after": "soon"}}})
    with pytest.raises(
        RegistryError, match=r"with the overrides of .*bad.yaml: jobs\[orders\]\.stalled_after"
    ):
        load_registry(registry, overrides=bad)
    flat = _write(tmp_path / "flat.yaml", {"orders": {"schedule": "1 minute"}})
    with pytest.raises(RegistryError, match="expected `jobs:` mapping job names"):
        load_registry(registry, overrides=flat)


def test_the_stack_proofs_overrides_fit_the_shipped_registry(tmp_path: Path) -> None:
    """tests/deploy/stack/registry-overrides.yaml changes only keys of registered jobs, and the
    job configs it names belong to those jobs."""
    proof = Path(__file__).parents[1] / "deploy" / "stack"
    data = yaml.safe_load((proof / "registry-overrides.yaml").read_text())
    for keys in data["jobs"].values():
        # Mounted at /opt/hubflow/stack-test in the stack; read from the repository here.
        keys["config"] = str(proof / Path(keys["config"]).name)
    registry = load_registry(overrides=_write(tmp_path / "overrides.yaml", data))
    for name in data["jobs"]:
        assert registry.job(name).paths.name == name


def test_scheduled_runs_retry_with_a_short_growing_delay_by_default(tmp_path: Path) -> None:
    config = _config(tmp_path)
    job = load_registry(_write(tmp_path / "a.yaml", {"jobs": [_entry(config)]})).job("orders")
    assert (job.retries, job.retry_delay, job.max_retry_delay) == (2, "30 seconds", "10 minutes")
    changed = load_registry(
        _write(
            tmp_path / "b.yaml",
            {"jobs": [_entry(config, retries=0, retry_delay="5 seconds", max_retry_delay="5 seconds")]},
        )
    ).job("orders")
    assert (changed.retries, changed.retry_delay, changed.max_retry_delay) == (0, "5 seconds", "5 seconds")


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"retries": -1}, r"jobs\[orders\]\.retries: Input should be greater than or equal to 0"),
        ({"retries": "two"}, r"jobs\[orders\]\.retries: Input should be a valid integer"),
        (
            {"quarantine_after": 0},
            r"jobs\[orders\]\.quarantine_after: Input should be greater than or equal to 1",
        ),
        ({"quarantine_after": "often"}, r"jobs\[orders\]\.quarantine_after: Input should be a valid integer"),
        ({"retry_delay": "soon"}, r"jobs\[orders\]\.retry_delay: .*'soon' is not a duration"),
        ({"retry_delay": "0 seconds"}, r"jobs\[orders\]\.retry_delay: .*must be longer than zero"),
        ({"max_retry_delay": "forever"}, r"jobs\[orders\]\.max_retry_delay: .*'forever' is not a duration"),
        (
            {"retry_delay": "1 minute", "max_retry_delay": "30 seconds"},
            r"jobs\[orders\]\.max_retry_delay: .*'30 seconds' is shorter than retry_delay '1 minute'",
        ),
    ],
)
def test_bad_retry_keys_are_refused_naming_the_key(tmp_path: Path, keys: dict, message: str) -> None:
    with pytest.raises(RegistryError, match=message):
        load_registry(_write(tmp_path / "registry.yaml", {"jobs": [_entry(_config(tmp_path), **keys)]}))


def test_the_status_page_and_the_supervisor_judge_a_silent_job_by_the_same_heartbeat_timeout(
    tmp_path: Path,
) -> None:
    """A job supervised every 10 minutes may be silent 5: its supervisor and its status page both
    count it alive after 3 silent minutes and dead after 6 (one rule, the registry's)."""
    import json
    import os
    from datetime import UTC, datetime, timedelta

    from hubflow.operations.job_control import JobControl
    from hubflow.progress.history import ProgressSamples
    from hubflow.progress.job_snapshots import _fill_status
    from hubflow.registry import MIN_HEARTBEAT_TIMEOUT, RegisteredJob
    from hubflow.status import STATUS_FILE, this_host

    job = RegisteredJob(
        name="slow",
        application="files_to_lake",
        config="c.yaml",
        mode="streaming",
        supervise_every="10 minutes",
    )
    assert job.heartbeat_timeout == timedelta(minutes=5) > MIN_HEARTBEAT_TIMEOUT
    status_dir = tmp_path / "slow"
    status_dir.mkdir()
    beat = datetime.now(UTC)
    status = {"state": "running", "pid": os.getpid(), "host": this_host(), "heartbeat": beat.isoformat()}
    (status_dir / STATUS_FILE).write_text(json.dumps(status), encoding="utf-8")
    control = JobControl(job.name, str(status_dir), heartbeat_timeout=job.heartbeat_timeout)
    for silent, alive in ((timedelta(minutes=3), True), (timedelta(minutes=6), False)):
        snapshot: dict = {}
        _fill_status(snapshot, job, str(status_dir), ProgressSamples(), beat + silent)
        assert control.liveness(beat + silent).alive is alive
        assert snapshot["alive"] is alive, snapshot


def test_every_key_of_a_registry_entry_is_documented_in_the_airflow_guide() -> None:
    """docs/airflow.md's table of registry keys names every field of RegisteredJob (storage_conn_id...)."""
    from hubflow.registry import REPO_ROOT, RegisteredJob

    guide = (REPO_ROOT / "docs" / "airflow.md").read_text(encoding="utf-8")
    documented = {line.split("`")[1] for line in guide.splitlines() if line.startswith("| `")}
    assert set(RegisteredJob.model_fields) - documented == set()


def test_storage_conn_id_is_read_per_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.dags.helpers import landing_job, write_registry

    path = write_registry(
        tmp_path,
        [landing_job(tmp_path, "orders", storage_conn_id="lake_storage"), landing_job(tmp_path, "clicks")],
    )
    registry = load_registry(path)
    assert registry.job("orders").storage_conn_id == "lake_storage"
    assert registry.job("clicks").storage_conn_id is None


def _streaming(**entry: object) -> dict:
    return {"name": "clicks", "application": "a", "config": "c", "mode": "streaming", **entry}


def test_access_names_the_roles_that_read_and_act_and_becomes_every_dags_access_control(
    tmp_path: Path,
) -> None:
    from hubflow.dag_access import access_control

    access = {"read": ["clicks_viewers"], "act": ["clicks_oncall", "clicks_viewers"]}
    registry = load_registry(_write(tmp_path / "registry.yaml", {"jobs": [_streaming(access=access)]}))
    job = registry.job("clicks")
    assert job.access is not None and job.access.read == ["clicks_viewers"]
    assert access_control(job.access) == {
        "clicks_viewers": {"DAGs": {"can_read", "can_edit"}, "DAG Runs": {"can_read", "can_create"}},
        "clicks_oncall": {"DAGs": {"can_read", "can_edit"}, "DAG Runs": {"can_read", "can_create"}},
    }, "a role under both read and act gets act's permissions"
    reader = load_registry(
        _write(tmp_path / "registry.yaml", {"jobs": [_streaming(access={"read": ["auditors"]})]})
    ).job("clicks")
    assert access_control(reader.access) == {"auditors": {"DAGs": {"can_read"}, "DAG Runs": {"can_read"}}}
    plain = load_registry(_write(tmp_path / "registry.yaml", {"jobs": [_streaming()]})).job("clicks")
    assert plain.access is None and access_control(plain.access) is None, "no access: the defaults"


@pytest.mark.parametrize(
    ("access", "message"),
    [
        ({"read": ["a"], "trigger": ["b"]}, "jobs[clicks].access.trigger: unknown key"),
        ({"act": [""]}, "jobs[clicks].access: Value error, act names an empty role"),
        ({"read": ["  "]}, "jobs[clicks].access: Value error, read names an empty role"),
        ({"act": "clicks_oncall"}, "jobs[clicks].access.act: Input should be a valid list"),
        ({"act": [3]}, "jobs[clicks].access.act.0: Input should be a valid string"),
        ({}, "jobs[clicks].access: Value error, names no role; list Airflow roles under read and/or act"),
        (["clicks_oncall"], "jobs[clicks].access: Input should be a valid dictionary"),
    ],
)
def test_access_errors_name_the_key_and_the_job(tmp_path: Path, access: object, message: str) -> None:
    with pytest.raises(RegistryError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_registry(_write(tmp_path / "registry.yaml", {"jobs": [_streaming(access=access)]}))


def test_the_per_job_access_example_of_the_runbook_loads_as_written(tmp_path: Path) -> None:
    """docs/operations.md "Per-job access": its registry entry through the real loader, and its table
    of permissions is what the DAGs get."""
    import re

    from hubflow.dag_access import access_control
    from hubflow.repository import REPO_ROOT

    doc = (REPO_ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    section = doc.split("## Per-job access", 1)[1].split("\n## ", 1)[0]
    (example,) = [block for block in re.findall(r"```yaml\n(.*?)```", section, re.S) if "access:" in block]
    path = tmp_path / "registry.yaml"
    path.write_text(example, encoding="utf-8")
    control = access_control(load_registry(path).job("clicks").access)
    rows = re.findall(r"^\| `(read|act)` \| (.*?) \| (.*?) \|", section, re.M)
    documented = {
        key: {"DAGs": set(re.findall(r"`(\w+)`", dags)), "DAG Runs": set(re.findall(r"`(\w+)`", runs))}
        for key, dags, runs in rows
    }
    assert control == {"clicks_viewers": documented["read"], "clicks_oncall": documented["act"]}


ALERTS = {"notifiers": [{"smtp": {"to": "oncall@example.com"}}]}


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"finish_within": "soon"}, "jobs[orders].finish_within: Value error, 'soon' is not a duration"),
        (
            {"finish_within": "-5 minutes"},
            "jobs[orders].finish_within: Value error, '-5 minutes' is negative",
        ),
        ({"finish_within": "0 s"}, "jobs[orders].finish_within: Value error, '0 s' must be longer than zero"),
        (
            {"finish_within": "45m", "mode": "streaming", "schedule": None},
            "jobs[orders]: Value error, finish_within is for scheduled jobs, whose runs end; this job is "
            "streaming",
        ),
        (
            {"finish_within": "45m", "alerts": None},
            "finish_within pages through the job's alerts.notifiers, and this job has no alerts enabled: "
            "add alerts:",
        ),
        (
            {"finish_within": "45m", "alerts": {**ALERTS, "enabled": False}},
            "finish_within pages through the job's alerts.notifiers",
        ),
        (
            {"finish_within": "45m", "alerts": {**ALERTS, "alert_on": ["stalled"]}},
            "alerts.alert_on leaves out deadline-missed: add it to alert_on, or remove finish_within",
        ),
    ],
)
def test_finish_within_errors_name_the_key_and_what_to_do(tmp_path: Path, keys: dict, message: str) -> None:
    entry = {**_entry(_config(tmp_path), mode="scheduled", schedule="@hourly", alerts=ALERTS), **keys}
    with pytest.raises(RegistryError) as error:
        load_registry(_write(tmp_path / "registry.yaml", {"jobs": [entry]}))
    assert message in str(error.value), str(error.value)


def test_finish_within_reads_the_registry_grammar_of_durations(tmp_path: Path) -> None:
    from datetime import timedelta

    entry = _entry(_config(tmp_path), mode="scheduled", schedule="@hourly", alerts=ALERTS)
    registry = load_registry(
        _write(tmp_path / "registry.yaml", {"jobs": [{**entry, "finish_within": "45m"}]})
    )
    assert registry.jobs[0].finish_within_delta == timedelta(minutes=45)
    registry = load_registry(_write(tmp_path / "registry.yaml", {"jobs": [entry]}))
    assert registry.jobs[0].finish_within_delta is None
