"""Fixtures that start the real components: local Spark, a loopback standalone cluster, an Airflow DB.

Every process a fixture starts is stopped when the fixture ends. Spark's Python workers use this
interpreter (the project's virtualenv), never whatever ``python3`` is first on PATH.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# The suite starts thousands of Python processes (drivers, Airflow's task and CLI processes, Spark's
# Python workers) that import this repository's modules, which no install precompiled: an
# environment that forbids bytecode caches would have every one of them compile those modules again.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
# The tests' Spark JVMs live seconds to minutes and process little data: with the C1 compiler alone
# (no C2) a driver starts on half the CPU, which on 2 shared cores is most of the suite's time.
# Drivers (spark-submit, PySpark's gateway) read SPARK_SUBMIT_OPTS and pass the executor option on
# (a ``spark.*`` system property is Spark conf); the standalone master and worker read
# SPARK_DAEMON_JAVA_OPTS. Test tuning only: the jobs' own settings are untouched.
# Drivers also map the class archive ``make test-tools`` builds (tests/support/class_archive.py).
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
# And they evaluate expressions interpreted, without generated code: a test's batches hold a few
# rows, while Delta's log replay generates and compares the Java of a projection of its wide action
# schema in every task (a profile of a one-hour backfill: a fifth of the driver's CPU in
# CodeFormatter and Block.toString before the compiled-class cache is even asked); interpreted, the
# same backfill takes about 20% less CPU (docs/benchmarks.md, "The test suite"). Spark runs its
# own expression tests in both modes; the jobs' own settings, and the compose stack, keep codegen.
TEST_SQL_OPTIONS = "-Dspark.sql.codegen.factoryMode=NO_CODEGEN -Dspark.sql.codegen.wholeStage=false"

from tests.support import class_archive  # noqa: E402

os.environ.setdefault(
    "SPARK_SUBMIT_OPTS",
    f"{TEST_JVM_OPTIONS} {TEST_SQL_OPTIONS} {class_archive.driver_options()} "
    f"-Dspark.executor.defaultJavaOptions={TEST_JVM_OPTIONS}",
)
os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", TEST_JVM_OPTIONS)

from tests.support import cpu_burner  # noqa: E402
from tests.support.airflow_db import AirflowHome, create_airflow_home, remove_airflow_home  # noqa: E402
from tests.support.azurite import Azurite, azurite_problem, start_azurite  # noqa: E402
from tests.support.spark_cluster import StandaloneCluster, start_cluster  # noqa: E402

_BURNERS = pytest.StashKey[list]()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A local[2] SparkSession (Delta enabled, Python workers on Unix domain sockets and checkpoints
    written through the FileSystem API, like every job's) with the UI off and every directory under
    a temporary folder."""
    from pyspark.sql import SparkSession

    from hubflow_jobs.runtime.session import CHECKPOINT_CONF, DELTA_CONF, PYTHON_WORKER_CONF

    base = tmp_path_factory.mktemp("spark")
    builder = SparkSession.builder
    for key, value in {**DELTA_CONF, **PYTHON_WORKER_CONF, **CHECKPOINT_CONF}.items():
        builder = builder.config(key, value)
    session = (
        builder.master("local[2]")
        .appName("hubflow-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .config("spark.sql.warehouse.dir", str(base / "warehouse"))
        .config("spark.local.dir", str(base / "local"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={base / 'derby'}")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A Spark standalone master and one worker on 127.0.0.1, stopped after the session."""
    cluster = start_cluster(tmp_path_factory.mktemp("spark-cluster"))
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowHome]:
    """An Airflow home with a migrated metadata DB (PostgreSQL on 127.0.0.1:5432 when reachable)."""
    home = create_airflow_home(
        tmp_path_factory.mktemp("airflow-home"), REPO_ROOT / "dags", REPO_ROOT / "plugins"
    )
    yield home
    remove_airflow_home(home)


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    """Azurite's Blob service on a free port, its data in a temporary folder, stopped after the session.

    Skipped only where Node.js is missing; when Node.js is there but Azurite is not installed, the
    tests fail and say to run ``make test-tools``.
    """
    if shutil.which("node") is None:
        pytest.skip(azurite_problem() or "Node.js is missing")
    server = start_azurite(tmp_path_factory.mktemp("azurite"))
    yield server
    server.stop()


@pytest.fixture
def blob_access(azurite: Azurite) -> Iterator:
    """Azurite's account registered as this process's storage access (as the operators do from the
    job's Airflow connection); forgotten after the test."""
    from hubflow.storage.azure import forget_accesses, use_access

    access = azurite.access()
    forget_accesses()
    use_access(access)
    yield access
    forget_accesses()


def pytest_addoption(parser: pytest.Parser) -> None:
    cpu_burner.add_option(parser)


@pytest.hookimpl(trylast=True)  # after the terminal reporter, which says that the burners run
def pytest_configure(config: pytest.Config) -> None:
    config.stash[_BURNERS] = cpu_burner.start(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    cpu_burner.stop(config.stash.get(_BURNERS, []))


@pytest.hookimpl(trylast=True)  # after `-m` deselection: a deselected proof builds nothing
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Where the docker-compose stack proof runs, so its minutes of building and waiting overlap the rest.

    - In a pytest-xdist worker (``make test`` runs ``-n 3 --dist loadfile --no-loadscope-reorder``) the
      proof's file is the first unit of work: one worker spends the proof's waits on it (its
      ``scripts/stack.sh up`` makes any missing image) while the others run the rest of the suite,
      and then it joins in.
    - In a single process (``make stack-test``, ``make test-all``) the proof runs last and its images
      start building now, in the background (tests/support/compose_stack.py).
    """
    stack = [item for item in items if item.get_closest_marker("stack")]
    if not stack:
        return
    rest = [item for item in items if not item.get_closest_marker("stack")]
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: every worker collects the same order
        items[:] = stack + rest
        return
    items[:] = rest + stack
    from tests.support.compose_stack import start_image_build

    start_image_build()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A background image build still running when the session ends (the proof never started)
    is stopped, and so is the dockerd it may have started."""
    from tests.support.compose_stack import stop_image_build_and_docker

    stop_image_build_and_docker()
