"""docker-compose.yml, checked without a Docker engine: schema, references, ordering, ports.

Fast checks of the file itself; tests/deploy/test_stack.py runs the stack for real. The
compose-spec JSON schema comes from Debian's ``docker-compose`` package (1.29), whose
``docker-compose config`` also validates the file without talking to an engine; both tests skip,
naming the package, when it is not installed.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.compose_file import (
    COMPOSE_FILE,
    DEBIAN_COMPOSE_SCHEMA,
    REPO_ROOT,
    MissingVariable,
    bind_sources,
    host_ports,
    interpolate,
    load_compose,
    mount_targets,
    named_volumes,
)

CELERY_WORKERS = {"airflow-worker-1", "airflow-worker-2"}
AIRFLOW_SERVICES = {
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
} | CELERY_WORKERS
SPARK_SERVICES = {"spark-master", "spark-worker-1", "spark-worker-2"}
#: Services of the compose profile "microsoft" (Microsoft's emulator and Azurite).
MICROSOFT_SERVICES = {"azurite", "eventhubs-microsoft", "eventhubs-microsoft-ready"}
#: Services that run the project image built from ./Dockerfile.
HUBFLOW_IMAGE_SERVICES = AIRFLOW_SERVICES | SPARK_SERVICES | {"eventhubs", "eventhubs-microsoft-ready"}
#: The stack's secrets, which docker-compose.yml has no default for and scripts/stack.sh
#: generates; nothing else: the default stack needs no .env (see deploy/env.example).
SECRETS = (
    "HUBFLOW_JWT_SECRET",
    "HUBFLOW_FERNET_KEY",
    "HUBFLOW_POSTGRES_PASSWORD",
    "HUBFLOW_SPARK_AUTH_SECRET",
)
USER_ENV: dict[str, str] = {
    "HUBFLOW_JWT_SECRET": "test-only-" + "j" * 40,
    "HUBFLOW_FERNET_KEY": base64.urlsafe_b64encode(b"k" * 32).decode(),
    "HUBFLOW_POSTGRES_PASSWORD": "test-only-database-password",
    "HUBFLOW_SPARK_AUTH_SECRET": "test-only-" + "s" * 40,
}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """The compose file with variables substituted from their defaults."""
    return interpolate(load_compose(), USER_ENV)


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def test_compose_file_matches_the_compose_spec_schema() -> None:
    if not DEBIAN_COMPOSE_SCHEMA.exists():
        pytest.skip(f"no compose-spec schema at {DEBIAN_COMPOSE_SCHEMA}: apt-get install -y docker-compose")
    import jsonschema

    validator = jsonschema.Draft201909Validator(json.loads(DEBIAN_COMPOSE_SCHEMA.read_text()))
    document = load_compose()
    validator.validate(document)
    broken = json.loads(json.dumps(document))
    broken["services"]["redis"]["depends_on"] = {"postgres": {"condition": "when_ready"}}
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(broken)  # the schema does check what matters here


def _docker_compose_config(extra: dict[str, str]) -> subprocess.CompletedProcess:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("Debian's docker-compose is not installed: apt-get install -y docker-compose")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEPT_EULA", "HUBFLOW_", "COMPOSE_"))}
    run = [binary, "--project-directory", str(REPO_ROOT), "-f", str(COMPOSE_FILE), "config"]
    return subprocess.run(run, env={**env, **extra}, capture_output=True, text=True, timeout=60)


def test_docker_compose_config_accepts_the_file_with_only_the_generated_secrets() -> None:
    accepted = _docker_compose_config(USER_ENV)
    assert accepted.returncode == 0, accepted.stderr
    resolved = yaml.safe_load(accepted.stdout)
    assert set(resolved["services"]) >= AIRFLOW_SERVICES | SPARK_SERVICES | {"eventhubs"}
    # Nobody accepts Microsoft's licence by default: its emulator then refuses to start by itself.
    assert resolved["services"]["eventhubs-microsoft"]["environment"]["ACCEPT_EULA"] == "N"
    environment = resolved["services"]["airflow-scheduler"]["environment"]
    assert environment["AIRFLOW__API_AUTH__JWT_SECRET"] == USER_ENV["HUBFLOW_JWT_SECRET"]
    assert environment["AIRFLOW__CORE__FERNET_KEY"] == USER_ENV["HUBFLOW_FERNET_KEY"]


def test_docker_compose_without_the_secrets_stops_and_says_how_to_get_them() -> None:
    refused = _docker_compose_config({})
    assert refused.returncode != 0
    assert "HUBFLOW_" in refused.stderr and "is not set - run make stack-up" in refused.stderr, refused.stderr


def test_only_the_secrets_are_required(services: dict[str, dict[str, Any]]) -> None:
    assert "${" not in json.dumps(services)  # every other ${VAR} has a default
    for name in SECRETS:
        with pytest.raises(MissingVariable, match=name):
            interpolate(load_compose(), {k: v for k, v in USER_ENV.items() if k != name})
    assert "hubflow-local-only-jwt-secret" not in COMPOSE_FILE.read_text(), "no published default secret"


def _stack_script(tmp_path: Path) -> Path:
    """scripts/stack.sh copied under ``tmp_path``: its state folder is then tmp_path/.hubflow/stack."""
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "stack.sh"
    shutil.copy(REPO_ROOT / "scripts" / "stack.sh", script)
    return script


def _secrets(script: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HUBFLOW_")}
    return subprocess.run(
        ["bash", str(script), "secrets"], env={**clean, **env}, capture_output=True, text=True, timeout=60
    )


def test_stack_sh_generates_private_secrets_once_and_never_prints_them(tmp_path: Path) -> None:
    script = _stack_script(tmp_path)
    first = _secrets(script)
    assert first.returncode == 0, first.stderr
    file = tmp_path / ".hubflow" / "stack" / "secrets.env"
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    values = dict(line.split("=", 1) for line in file.read_text().splitlines())
    assert set(values) == set(SECRETS)
    assert len(values["HUBFLOW_JWT_SECRET"]) >= 32
    assert len(values["HUBFLOW_SPARK_AUTH_SECRET"]) >= 32
    assert len(set(values.values())) == len(SECRETS), "each secret its own value"
    assert len(base64.urlsafe_b64decode(values["HUBFLOW_FERNET_KEY"])) == 32
    second = _secrets(script)
    assert second.returncode == 0, second.stderr
    assert dict(line.split("=", 1) for line in file.read_text().splitlines()) == values, "generated once"
    for result in (first, second):
        for value in values.values():
            assert value not in result.stdout + result.stderr


def test_stack_sh_adds_the_secrets_an_older_stacks_file_lacks_and_keeps_the_others(tmp_path: Path) -> None:
    script = _stack_script(tmp_path)
    file = tmp_path / ".hubflow" / "stack" / "secrets.env"
    file.parent.mkdir(parents=True)
    older = {name: USER_ENV[name] for name in ("HUBFLOW_JWT_SECRET", "HUBFLOW_FERNET_KEY")}
    file.write_text("".join(f"{name}={value}\n" for name, value in older.items()))
    file.chmod(0o600)
    result = _secrets(script)
    assert result.returncode == 0, result.stderr
    values = dict(line.split("=", 1) for line in file.read_text().splitlines())
    assert set(values) == set(SECRETS)
    assert {name: values[name] for name in older} == older, "the stack's existing secrets are kept"
    assert "HUBFLOW_POSTGRES_PASSWORD HUBFLOW_SPARK_AUTH_SECRET" in result.stderr


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "HUBFLOW_JWT_SECRET",
            "hubflow-local-only-jwt-secret-change-me",
            "HUBFLOW_JWT_SECRET is empty or a published",
        ),
        ("HUBFLOW_JWT_SECRET", "short", "HUBFLOW_JWT_SECRET is 5 characters long; use at least 32"),
        ("HUBFLOW_FERNET_KEY", "not-a-key", "HUBFLOW_FERNET_KEY is not a Fernet key"),
        (
            "HUBFLOW_SPARK_AUTH_SECRET",
            "tiny",
            "HUBFLOW_SPARK_AUTH_SECRET is 4 characters long; use at least 32",
        ),
        ("HUBFLOW_POSTGRES_PASSWORD", "airflow", "HUBFLOW_POSTGRES_PASSWORD is empty or a published value"),
        ("HUBFLOW_POSTGRES_PASSWORD", "p@ss/word#1", "HUBFLOW_POSTGRES_PASSWORD may hold only letters"),
    ],
)
def test_stack_sh_refuses_published_short_or_malformed_secrets(
    tmp_path: Path, variable: str, value: str, message: str
) -> None:
    refused = _secrets(_stack_script(tmp_path), **{variable: value})
    assert refused.returncode == 1
    assert message in refused.stderr
    assert value not in refused.stderr.replace(message, "")


def test_the_expected_services_exist(services: dict[str, dict[str, Any]]) -> None:
    expected = AIRFLOW_SERVICES | SPARK_SERVICES | MICROSOFT_SERVICES | {"postgres", "redis", "eventhubs"}
    assert expected == set(services)
    for name in MICROSOFT_SERVICES:
        assert services[name]["profiles"] == ["microsoft"], f"{name} must stay behind the profile"
    for name in set(services) - MICROSOFT_SERVICES:
        assert "profiles" not in services[name], f"{name} must start by default"


def test_postgres_and_redis_images_are_variables_defaulting_to_the_official_ones(
    services: dict[str, dict[str, Any]],
) -> None:
    assert (services["postgres"]["image"], services["redis"]["image"]) == (
        "postgres:15.19-bookworm",
        "redis:7.0.15-bookworm",
    )
    local = interpolate(
        load_compose(),
        {
            **USER_ENV,
            "HUBFLOW_POSTGRES_IMAGE": "hubflow-postgres:15-bookworm",
            "HUBFLOW_REDIS_IMAGE": "hubflow-redis:7.0-bookworm",
        },
    )["services"]
    assert local["postgres"]["image"] == "hubflow-postgres:15-bookworm"
    assert local["redis"]["image"] == "hubflow-redis:7.0-bookworm"


def test_build_contexts_dockerfiles_and_copied_paths_exist(services: dict[str, dict[str, Any]]) -> None:
    built = {name: s["build"] for name, s in services.items() if "build" in s}
    assert set(built) == HUBFLOW_IMAGE_SERVICES
    for name, build in built.items():
        context = REPO_ROOT / build["context"]
        assert context.is_dir(), f"{name}: build context {context} does not exist"
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        assert dockerfile.is_file(), f"{name}: {dockerfile} does not exist"
        assert services[name]["image"] == "hubflow:local", f"{name} must run the one hubflow image"
    for dockerfile in (
        REPO_ROOT / "Dockerfile",
        REPO_ROOT / "deploy/postgres/Dockerfile",
        REPO_ROOT / "deploy/redis/Dockerfile",
    ):
        context = dockerfile.parent
        ignore_file = context / ".dockerignore"
        ignored = {
            line.strip()
            for line in (ignore_file.read_text().splitlines() if ignore_file.exists() else [])
            if line.strip() and not line.startswith("#")
        }
        for line in dockerfile.read_text().splitlines():
            if line.startswith("COPY"):
                sources = [part for part in line.split()[1:-1] if not part.startswith("--")]
                for source in sources:
                    assert (context / source).exists(), f"{dockerfile} copies {source}, which does not exist"
                    assert source.rstrip("/") not in ignored, (
                        f".dockerignore excludes {source}, which is copied"
                    )


def test_dockerfile_builds_from_debian_with_java_and_the_locked_project() -> None:
    text = (REPO_ROOT / "Dockerfile").read_text()
    base_images = [line for line in text.splitlines() if line.startswith("FROM")]
    assert base_images == ["FROM debian:bookworm-slim"]
    assert "python3-venv" in text and "openjdk-17-jre-headless" in text and "JAVA_HOME" in text
    sync = "uv pip sync --no-cache --require-hashes --no-build-isolation --compile-bytecode \\\n"
    assert sync + "        $find_links /opt/hubflow/requirements.lock" in text
    assert "apache-airflow-providers-celery" not in text  # the lock has it; nothing reinstalls it
    installed = "/opt/hubflow/src/connectors /opt/hubflow/src/emulator /opt/hubflow/src/control \\\n"
    assert installed + "        /opt/hubflow/src/jobs;" in text
    assert "hubflow-jobs.pth" not in text  # jobs/ is installed as the package hubflow-jobs
    lock = (REPO_ROOT / "requirements.lock").read_text().splitlines()
    pins = dict(line.split()[0].split("==", 1) for line in lock if "==" in line and not line.startswith(" "))
    assert pins["apache-airflow"] == "3.3.2"
    assert "apache-airflow-providers-celery" in pins
    assert "pyspark-client" not in pins  # it would overwrite pyspark's Python files


def test_build_inputs_of_this_machine_stay_out_of_git_but_in_the_build_context() -> None:
    """The host's CA bundle reaches the build through .build/, which git ignores and Docker sends."""
    rules = (REPO_ROOT / ".build/.gitignore").read_text().splitlines()
    assert "*" in rules and "!README.md" in rules
    ignored = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    assert not any(line.strip().rstrip("/") in (".build", ".build/*") for line in ignored)
    assert ".hubflow" in ignored  # the wheelhouse is served during the build, never sent in the context
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    assert "COPY .build/ /tmp/hubflow-build/" in dockerfile
    assert "update-ca-certificates" not in dockerfile  # used while downloading, never trusted at run time


def test_bind_mounts_exist(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for source in bind_sources(service):
            path = (REPO_ROOT / source).resolve()
            assert path.exists(), f"{name} mounts {source}, which does not exist"
            assert path.is_relative_to(REPO_ROOT), f"{name} mounts {source} from outside the repository"
    emulator = services["eventhubs-microsoft"]
    mounts = dict(
        (str(v).split(":")[1], str(v).split(":")[0]) for v in emulator["volumes"] if isinstance(v, str)
    )
    assert mounts["/Eventhubs_Emulator/ConfigFiles/Config.json"] == "./deploy/eventhubs/Config.json"
    assert (REPO_ROOT / "deploy/eventhubs/Config.json").is_file()


def test_named_volumes_are_declared(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes") or {})
    for name, service in compose["services"].items():
        for volume in named_volumes(service):
            assert volume in declared, f"{name} mounts volume {volume}, not declared under volumes:"


def test_shared_data_volumes_reach_every_container_that_uses_them(
    services: dict[str, dict[str, Any]],
) -> None:
    """The job configs' paths exist in the driver (Celery worker), executors and the status page."""
    config = yaml.safe_load((REPO_ROOT / "jobs/configs/landing_orders.yaml").read_text())
    paths = [
        config["checkpoint_root"],
        config["status_root"],
        config["sources"]["landing"]["path"],
        config["sources"]["landing"]["archive_dir"],
        config["sinks"]["lake"]["output_path"],
        config["sinks"]["lake"]["quarantine_path"],
    ]
    for name in CELERY_WORKERS | {
        "spark-worker-1",
        "spark-worker-2",
        "airflow-apiserver",
        "airflow-triggerer",
    }:
        targets = mount_targets(services[name])
        for path in paths:
            assert any(path == t or path.startswith(t.rstrip("/") + "/") for t in targets), (
                f"{name} does not mount a volume holding {path}"
            )


def test_every_dependency_waits_for_health_or_completion(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        depends = service.get("depends_on") or {}
        assert isinstance(depends, dict), f"{name}: depends_on must give a condition for each service"
        for target, rule in depends.items():
            assert target in services, f"{name} depends on {target}, which is not a service"
            assert target != name
            condition = rule["condition"]
            if condition == "service_healthy":
                assert "healthcheck" in services[target], f"{name} waits for {target}'s health: none defined"
            elif condition == "service_completed_successfully":
                assert services[target].get("restart", "no") == "no", f"{target} must be one-shot"
            else:
                assert (name, target) == ("eventhubs-microsoft-ready", "eventhubs-microsoft"), (
                    f"{name} -> {target}: {condition} does not wait for readiness"
                )
    one_shots = {"airflow-init", "eventhubs-microsoft-ready"}
    for name in (
        set(services) - one_shots - {"eventhubs-microsoft"}
    ):  # Microsoft's image has no tool to check with
        assert "healthcheck" in services[name], f"{name} has no healthcheck"
        assert services[name].get("restart") == "always", f"{name} is not restarted when it dies"
    # Every Airflow service (the Celery workers too) waits for the migration only, so they all start
    # at once instead of one after another (a task reaches the API server, the Spark master and the
    # hub when it runs, not when its worker starts).
    migrated = {"airflow-init": {"condition": "service_completed_successfully"}}
    for name in AIRFLOW_SERVICES - {"airflow-init"}:
        assert services[name]["depends_on"] == migrated, name


def test_host_ports_do_not_clash(services: dict[str, dict[str, Any]]) -> None:
    published: dict[int, str] = {}
    for name, service in services.items():
        for port in host_ports(service):
            assert port not in published, f"host port {port} is published by {published[port]} and {name}"
            published[port] = name
    assert published[8080] == "airflow-apiserver" and published[5672] == "eventhubs"
    assert published[5673] == "eventhubs-microsoft"
    assert 5432 not in published, "PostgreSQL stays inside the compose network (5432 is often taken)"
    moved = interpolate(load_compose(), {**USER_ENV, "HUBFLOW_AIRFLOW_PORT": "18080"})
    assert host_ports(moved["services"]["airflow-apiserver"]) == [18080]


def test_published_ports_listen_on_loopback_only(services: dict[str, dict[str, Any]]) -> None:
    """Development keys and the admin login stay off the network: every published port binds
    127.0.0.1 unless the user sets HUBFLOW_BIND_ADDRESS."""
    for name, service in services.items():
        for entry in service.get("ports", []):
            assert str(entry).startswith("127.0.0.1:"), f"{name} publishes {entry} beyond loopback"
    opened = interpolate(load_compose(), {**USER_ENV, "HUBFLOW_BIND_ADDRESS": "0.0.0.0"})
    assert opened["services"]["airflow-apiserver"]["ports"] == ["0.0.0.0:8080:8080"]


def test_airflow_runs_celery_with_the_spark_and_eventhubs_connections(
    services: dict[str, dict[str, Any]],
) -> None:
    for name in AIRFLOW_SERVICES:
        env = services[name]["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor", name
        assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://airflow-apiserver:8080/execution/"
    env = services["airflow-worker-1"]["environment"]
    spark = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert (spark["conn_type"], spark["host"], spark["port"]) == ("spark", "spark://spark-master", 7077)
    eventhubs = json.loads(env["AIRFLOW_CONN_EVENTHUBS_DEFAULT"])
    assert eventhubs["password"] == (
        "Endpoint=sb://eventhubs;SharedAccessKeyName=RootManageSharedAccessKey;"
        "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true"
    )
    hubs = [e["Name"] for e in _config_json()["UserConfig"]["NamespaceConfig"][0]["Entities"]]
    assert eventhubs["extra"]["eventhub_name"] in hubs


def test_eventhubs_connection_works_with_the_hook_and_the_sdk(services: dict[str, dict[str, Any]]) -> None:
    """The hook turns the compose connection into a string the azure-eventhub SDK accepts."""
    env = dict(os.environ)
    env["AIRFLOW_CONN_EVENTHUBS_DEFAULT"] = services["airflow-worker-1"]["environment"][
        "AIRFLOW_CONN_EVENTHUBS_DEFAULT"
    ]
    env["PYTHONPATH"] = str(REPO_ROOT / "plugins")
    script = (
        "from hubflow_plugins.hooks.eventhubs import EventHubsHook\n"
        "from azure.eventhub import EventHubProducerClient\n"
        "client = EventHubProducerClient.from_connection_string(EventHubsHook().connection_string())\n"
        "print(client.eventhub_name, client._address.hostname)\n"
        "client.close()\n"
    )
    result = subprocess.run(
        [str(Path(os.sys.executable)), "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-2:] == ["telemetry", "eventhubs"]


def test_spark_master_and_workers_run_from_the_same_image(services: dict[str, dict[str, Any]]) -> None:
    master = services["spark-master"]
    assert master["command"][:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    for name in ("spark-worker-1", "spark-worker-2"):
        worker = services[name]
        assert worker["command"][:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"]
        assert "spark://spark-master:7077" in worker["command"]
        assert worker["depends_on"]["spark-master"]["condition"] == "service_healthy"
    defaults = _spark_defaults()
    assert defaults["spark.master"] == "spark://spark-master:7077"
    # A default cap for applications that set none; registered jobs set their own (cores_max).
    assert "spark.deploy.defaultCores" in master["environment"]["SPARK_MASTER_OPTS"]


def test_spark_rpc_authentication_is_on_and_only_spark_and_driver_hosts_hold_its_secret(
    services: dict[str, dict[str, Any]],
) -> None:
    assert _spark_defaults()["spark.authenticate"] == "true"
    secret = USER_ENV["HUBFLOW_SPARK_AUTH_SECRET"]
    holders = {name for name, service in services.items() if secret in json.dumps(service)}
    assert holders == SPARK_SERVICES | CELERY_WORKERS, "the Spark secret reaches only Spark and driver hosts"
    for name in holders:
        assert services[name]["environment"]["_SPARK_AUTH_SECRET"] == secret, name
    # Airflow reaches its database with the generated password, never a published one.
    password = USER_ENV["HUBFLOW_POSTGRES_PASSWORD"]
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == password
    for name in AIRFLOW_SERVICES - CELERY_WORKERS:
        environment = services[name]["environment"]
        assert f"airflow:{password}@postgres/airflow" in environment["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert "airflow:airflow@" not in COMPOSE_FILE.read_text()


def test_the_celery_workers_where_job_code_runs_hold_none_of_airflows_secrets(
    services: dict[str, dict[str, Any]],
) -> None:
    """docs/deployment.md "What each service holds": a driver runs as the worker's user and can read
    its environment, so the workers get no Fernet key, JWT secret or database URL; the services
    that run no job code get all three."""
    airflows = [
        USER_ENV[name] for name in ("HUBFLOW_JWT_SECRET", "HUBFLOW_FERNET_KEY", "HUBFLOW_POSTGRES_PASSWORD")
    ]
    holders = {name for name, service in services.items() if any(s in json.dumps(service) for s in airflows)}
    assert holders == (AIRFLOW_SERVICES - CELERY_WORKERS) | {"postgres"}
    for name in AIRFLOW_SERVICES:
        environment = services[name]["environment"]
        # Task results in Redis (no password), the same for the scheduler that reads them.
        assert environment["AIRFLOW__CELERY__RESULT_BACKEND"] == "redis://redis:6379/1", name
    for name in CELERY_WORKERS:
        environment = services[name]["environment"]
        assert not {"AIRFLOW__CORE__FERNET_KEY", "AIRFLOW__API_AUTH__JWT_SECRET"} & set(environment)
        assert "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" not in environment
        assert (
            environment["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"]
            == "http://airflow-apiserver:8080/execution/"
        )


def test_every_celery_worker_can_host_drivers(services: dict[str, dict[str, Any]]) -> None:
    """No fixed driver host: each worker's drivers advertise that worker's own address."""
    assert "spark.driver.host" not in _spark_defaults()
    for name in CELERY_WORKERS:
        worker = services[name]
        assert worker["hostname"] == name
        script = worker["command"][-1]
        assert 'export SPARK_LOCAL_IP="$(hostname -i' in script and "exec airflow celery worker" in script
        assert worker["healthcheck"]["test"][-1] == "celery"


def test_eventhubs_is_hubflows_emulator_with_a_persistent_volume(services: dict[str, dict[str, Any]]) -> None:
    emulator = services["eventhubs"]
    command = emulator["command"]
    assert command[:3] == ["python", "-m", "eventhubs_emulator"]
    assert command[command.index("--config") + 1] == "/opt/hubflow/eventhubs/Config.json"
    data_dir = command[command.index("--data-dir") + 1]
    assert f"eventhubs-data:{data_dir}" in emulator["volumes"]
    assert "/health" in " ".join(emulator["healthcheck"]["test"])


def test_microsoft_emulator_uses_azurite_and_asks_for_the_eula(services: dict[str, dict[str, Any]]) -> None:
    emulator = services["eventhubs-microsoft"]
    assert emulator["image"].startswith("mcr.microsoft.com/azure-messaging/eventhubs-emulator:2.2.1@sha256:")
    env = emulator["environment"]
    assert (env["BLOB_SERVER"], env["METADATA_SERVER"], env["ACCEPT_EULA"]) == ("azurite", "azurite", "N")
    accepted = interpolate(load_compose(), {**USER_ENV, "ACCEPT_EULA": "Y"})["services"]
    assert accepted["eventhubs-microsoft"]["environment"]["ACCEPT_EULA"] == "Y"
    assert emulator["depends_on"]["azurite"]["condition"] == "service_healthy"


def test_config_json_serves_the_embedded_emulator(tmp_path: Path) -> None:
    """The same file configures the embedded emulator; the unmodified SDK sees its hub."""
    from azure.eventhub import EventHubProducerClient

    from eventhubs_emulator import Emulator, load_config

    config = load_config(REPO_ROOT / "deploy/eventhubs/Config.json")
    hub = config.hub("telemetry")
    assert hub.partition_count == 4 and "hubflow" in hub.consumer_groups
    with Emulator(config, port=0) as emulator:
        producer = EventHubProducerClient.from_connection_string(emulator.connection_string("telemetry"))
        try:
            assert producer.get_partition_ids() == ["0", "1", "2", "3"]
        finally:
            producer.close()


def test_config_json_keeps_to_microsofts_keys() -> None:
    """Only keys Microsoft's emulator reads: it must not meet the embedded emulator's extras."""
    document = _config_json()
    assert set(document) == {"UserConfig"}
    assert set(document["UserConfig"]) == {"NamespaceConfig", "LoggingConfig"}
    for entity in document["UserConfig"]["NamespaceConfig"][0]["Entities"]:
        assert set(entity) == {"Name", "PartitionCount", "ConsumerGroups"}


def test_env_example_names_every_variable_the_compose_file_reads() -> None:
    import re

    # ``$${HOSTNAME}`` is escaped: the container's shell expands it, not Compose.
    used = set(re.findall(r"(?<!\$)\$\{([A-Z_][A-Z0-9_]*)", COMPOSE_FILE.read_text()))
    example = (REPO_ROOT / "deploy/env.example").read_text()
    defined = set(re.findall(r"^(?:# )?([A-Z_][A-Z0-9_]*)=", example, re.M))  # commented: no default
    assert used <= defined, f"deploy/env.example lacks {sorted(used - defined)}"


def _config_json() -> dict[str, Any]:
    return json.loads((REPO_ROOT / "deploy/eventhubs/Config.json").read_text())


def _spark_defaults() -> dict[str, str]:
    values = {}
    for line in (REPO_ROOT / "deploy/spark/spark-defaults.conf").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition(" ")
            values[key] = value.strip()
    return values


def test_the_stack_proofs_user_pipeline_is_mounted_where_it_runs_and_binds_its_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stack proof's telemetry_bronze runs a pipeline of a user's own (tests/deploy/stack/): its
    module is mounted into the image's pipelines folder of every Airflow service (the Celery workers
    run its drivers, the scheduler and the DAG processor read its registry entry), and the function
    binds to the job's config, so a mistake costs seconds here instead of a stack proof's run."""
    from hubflow_jobs.pipeline.job import load_pipeline

    proof = REPO_ROOT / "tests" / "deploy" / "stack"
    entry = yaml.safe_load((proof / "registry-overrides.yaml").read_text())["jobs"]["telemetry_bronze"]
    application = entry["application"]
    module = application.split(":")[0]
    pipelines_dir = re.search(r"HUBFLOW_PIPELINES_DIR=(\S+)", (REPO_ROOT / "Dockerfile").read_text())
    assert pipelines_dir, "the Dockerfile sets HUBFLOW_PIPELINES_DIR"
    target = f"{pipelines_dir.group(1)}/{module}.py"
    override = load_compose(proof / "compose.override.yml")["services"]
    sources = set()
    for name in AIRFLOW_SERVICES:
        mounts = {str(v).split(":")[1]: str(v).split(":")[0] for v in override[name]["volumes"]}
        assert target in mounts, f"{name} does not mount the proof's pipeline at {target}"
        sources.add(mounts[target])
    (source,) = sources
    module_file = REPO_ROOT / source
    assert module_file.is_file() and module_file.name == f"{module}.py"
    # Bound as a driver would: the module from the folder the file is mounted from.
    monkeypatch.setenv("HUBFLOW_PIPELINES_DIR", str(module_file.parent))
    monkeypatch.setattr(sys, "path", list(sys.path))  # load_function puts the folder on it
    monkeypatch.delitem(sys.modules, module, raising=False)
    config_file = proof / Path(entry["config"]).name  # mounted at /opt/hubflow/stack-test
    config, binding = load_pipeline(application, str(config_file), check_environment=False)
    sys.modules.pop(module, None)
    assert binding.sources == ("events",)
    assert config.sources["events"].kind == "eventhubs"
    (sink,) = config.sinks.values()
    assert (sink.kind, sink.partition_by) == ("delta", ["ingest_date"])
