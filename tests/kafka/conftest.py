"""The two Kafka servers every conformance test runs against, as one ``server`` fixture.

``kafka``: one Apache Kafka broker (KRaft, tests/support/kafka_broker.py) for the whole session (per
pytest-xdist worker); each test gets fresh topics on it. ``emulator``: a fresh in-process emulator per
test with its Kafka endpoint, whose hubs are the topics. Both take SASL PLAIN with user
``$ConnectionString`` and a connection string as the password, as Event Hubs does. A failing test that
used the broker shows the tail of the broker's log.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eventhubs_emulator import Emulator, EmulatorConfig
from tests.support import kafka_broker
from tests.support.kafka_broker import KafkaBroker

#: The emulator's hubs: one per partition count the tests ask for.
EMULATOR_HUBS = {"p1": 1, "p2": 2, "p4": 4}
SERVERS = ["kafka", "emulator"]


class KafkaServer:
    """What a conformance test needs of a server: its address, credentials and topics."""

    def __init__(self, kind: str, bootstrap: str, password: str) -> None:
        self.kind = kind
        self.bootstrap = bootstrap
        self.password = password

    def topic(self, partitions: int) -> str:
        """A topic with ``partitions`` partitions that no other test writes to."""
        raise NotImplementedError

    def config(self, password: str | None = None, **overrides: Any) -> dict[str, Any]:
        """kafka-python settings: SASL PLAIN, user ``$ConnectionString``, the connection string."""
        settings: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": kafka_broker.USERNAME,
            "sasl_plain_password": self.password if password is None else password,
            "request_timeout_ms": 30_000,
        }
        settings.update(overrides)
        return settings

    def java_config(self, path: Path) -> Path:
        """The same settings as a Java client properties file (``--command-config``)."""
        jaas = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{kafka_broker.USERNAME}" password="{self.password}";'
        )
        path.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
            f"sasl.jaas.config={jaas.replace(chr(92), chr(92) * 2)}\n"
        )
        return path


class BrokerServer(KafkaServer):
    _names = itertools.count()

    def __init__(self, broker: KafkaBroker, test_name: str) -> None:
        super().__init__("kafka", broker.bootstrap, kafka_broker.PASSWORD)
        self.broker = broker
        self._prefix = "".join(c if c.isalnum() else "-" for c in test_name)[:60]

    def topic(self, partitions: int) -> str:
        name = f"{self._prefix}-{partitions}-{next(self._names)}"
        self.broker.create_topic(name, partitions)
        return name


class EmulatorServer(KafkaServer):
    def __init__(self, emulator: Emulator) -> None:
        assert emulator.kafka_bootstrap is not None
        super().__init__("emulator", emulator.kafka_bootstrap, emulator.kafka_password())
        self.emulator = emulator
        self._used: set[str] = set()

    def topic(self, partitions: int) -> str:
        name = f"p{partitions}"
        assert name in EMULATOR_HUBS and name not in self._used, f"one p{partitions} topic per test"
        self._used.add(name)
        return name


@pytest.fixture(scope="session")
def apache_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """One Apache Kafka broker for the session (per xdist worker), killed at the end."""
    problem = kafka_broker.kafka_libs_missing()
    if problem:
        pytest.skip(problem)
    with KafkaBroker(tmp_path_factory.mktemp("apache-kafka")) as broker:
        yield broker


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest) -> Iterator[KafkaServer]:
    """Each server in turn (see the module docstring)."""
    if request.param == "kafka":
        broker = request.getfixturevalue("apache_kafka")
        request.node.kafka_broker = broker
        yield BrokerServer(broker, request.node.originalname)
    else:
        with Emulator(EmulatorConfig.many_hubs(EMULATOR_HUBS, kafka_port=0)) as emulator:
            yield EmulatorServer(emulator)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    broker = getattr(item, "kafka_broker", None)
    if report.failed and broker is not None:
        report.sections.append(("Apache Kafka broker log (tail)", broker.log_tail(80)))
