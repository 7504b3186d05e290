"""A real Apache Kafka broker (KRaft, one combined broker and controller) on loopback, for tests.

The jars are jvm-deps-kafka.lock's, installed into ``tests/support/kafka/libs`` by
``scripts/bootstrap.sh --with-test-tools``; nothing is fetched here. The broker is authenticated as
Event Hubs' Kafka endpoint is: a SASL_PLAINTEXT listener with PLAIN, whose only user is
``$ConnectionString`` and whose password is an Event Hubs connection string (``PASSWORD``).

Example::

    with KafkaBroker(tmp_path) as broker:
        broker.bootstrap            # "127.0.0.1:PORT"
        broker.create_topic("t", 4)

Ready means a real ApiVersions answer over the SASL listener (kafka-python's ``check_version``),
never a sleep; the log (the JVM's stdout and stderr) is in ``broker.log_path`` and
``broker.log_tail()`` is what a failing test shows. ``stop()`` kills the JVM.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.support.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
LIBS = ROOT / "tests" / "support" / "kafka" / "libs"
USERNAME = "$ConnectionString"
#: The broker's only password: an Event Hubs namespace connection string, as clients send it.
PASSWORD = (
    "Endpoint=sb://127.0.0.1/;SharedAccessKeyName=RootManageSharedAccessKey;"
    "SharedAccessKey=a2Fma2EtY29uZm9ybWFuY2UtYnJva2VyLWtleQ=="
)
#: JVM options for a small, quick-starting test broker (C1 only: startup, not throughput, matters).
JVM_OPTIONS = [
    "-Xms128m",
    "-Xmx512m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
]
READY_DEADLINE = 90.0  # seconds from the JVM's start: a bound on a loaded 2-core machine, not a speed


class KafkaBrokerError(RuntimeError):
    """The broker could not be formatted or did not become ready; the message holds its log's tail."""


def kafka_libs_missing() -> str | None:
    """Why the broker cannot start here (the lock is not installed), or None."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no java (Kafka needs Java 17+)"
    if not (LIBS / ".hubflow-jvm-deps").exists():
        return f"{LIBS} is not installed: run scripts/bootstrap.sh --with-test-tools (make test-tools)"
    return None


def java_command(main_class: str, *args: str, log4j: Path | None = None) -> list[str]:
    """A java command line running ``main_class`` of the locked Kafka jars."""
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
    logging_options = [f"-Dlog4j2.configurationFile={log4j}"] if log4j else []
    return [java, *JVM_OPTIONS, *logging_options, "-cp", f"{LIBS}/*", main_class, *args]


def _jaas(username: str, password: str, *, server: bool) -> str:
    users = f' user_{username}="{password}"' if server else ""
    return (
        f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{username}" '
        f'password="{password}"{users};'
    )


class KafkaBroker:
    """One KRaft node (``process.roles=broker,controller``) in ``work_dir``; see the module docstring."""

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self.port = free_port()
        self.controller_port = free_port()
        self.log_path = work_dir / "broker.log"
        self.properties = work_dir / "server.properties"
        self.log4j = work_dir / "log4j2.properties"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client_config(self, password: str = PASSWORD) -> dict[str, Any]:
        """kafka-python settings for this broker, as a client sets them for Event Hubs."""
        return {
            "bootstrap_servers": self.bootstrap,
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": USERNAME,
            "sasl_plain_password": password,
        }

    def _write_config(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"SASL_PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"SASL_PLAINTEXT://127.0.0.1:{self.port}",
            "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": _jaas(USERNAME, PASSWORD, server=True),
            "log.dirs": str(self.work_dir / "data"),
            "num.partitions": "1",
            # auto.create.topics.enable stays Kafka's true (Event Hubs differs: test_conformance.py)
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # group.initial.rebalance.delay.ms stays Kafka's 3000, as the emulator's
            "log.flush.interval.messages": str(2**62),
        }
        lines = [f"{key}={value.replace(chr(92), chr(92) * 2)}" for key, value in settings.items()]
        self.properties.write_text("\n".join(lines) + "\n")
        self.log4j.write_text(
            "appender.out.type=Console\nappender.out.name=OUT\nappender.out.layout.type=PatternLayout\n"
            "appender.out.layout.pattern=[%d] %p %m (%c)%n\nrootLogger.level=WARN\n"
            "rootLogger.appenderRef.out.ref=OUT\n"
        )

    def start(self) -> KafkaBroker:
        """Format the storage, start the JVM and wait for ApiVersions over the SASL listener."""
        problem = kafka_libs_missing()
        if problem:
            raise KafkaBrokerError(problem)
        self._write_config()
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        with open(self.log_path, "ab") as log:
            formatted = subprocess.run(
                java_command(
                    "kafka.tools.StorageTool",
                    "format",
                    # One argument with "=": a URL-safe base64 id starts with "-" one time in 64,
                    # and "-t <id>" then reads as a missing value (argparse takes "-..." for an option).
                    f"--cluster-id={cluster_id}",
                    "-c",
                    str(self.properties),
                    log4j=self.log4j,
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if formatted.returncode != 0:
            raise KafkaBrokerError(
                f"kafka-storage format failed ({formatted.returncode}):\n{self.log_tail()}"
            )
        log = open(self.log_path, "ab")  # the broker writes it until stop()
        try:
            self._process = subprocess.Popen(
                java_command("kafka.Kafka", str(self.properties), log4j=self.log4j),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        from kafka import KafkaAdminClient
        from kafka.errors import KafkaError

        deadline = time.monotonic() + READY_DEADLINE
        last: Exception | None = None
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise KafkaBrokerError(f"the broker exited ({self._process.returncode}):\n{self.log_tail()}")
            try:
                admin = KafkaAdminClient(**self.client_config(), request_timeout_ms=10_000)
            except (KafkaError, OSError) as exc:  # refused until the listener is bound
                last = exc
                time.sleep(0.2)
                continue
            try:
                admin.list_topics()  # an answered Metadata request: the broker is registered, not only bound
                return
            except (KafkaError, OSError) as exc:
                last = exc
                time.sleep(0.2)
            finally:
                admin.close()
        raise KafkaBrokerError(f"not ready in {READY_DEADLINE:.0f} s ({last!r}):\n{self.log_tail()}")

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        """Create ``name`` with ``partitions`` partitions (replication 1) and topic ``configs`` (e.g.
        ``{"message.timestamp.type": "LogAppendTime"}``), and wait until it has leaders."""
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic

        admin = KafkaAdminClient(**self.client_config(), request_timeout_ms=20_000)
        try:
            admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs or {})])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                described = admin.describe_topics([name])
                parts = described[0].get("partitions", []) if described else []
                if len(parts) == partitions and all(p.get("leader_id", -1) >= 0 for p in parts):
                    return
                time.sleep(0.1)
            raise KafkaBrokerError(f"topic {name} has no leaders after 30 s:\n{self.log_tail()}")
        finally:
            admin.close()

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(timeout=30)
        self._process = None

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
