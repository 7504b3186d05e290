"""The one start-up helper (eventhubs_emulator.launcher) and the config writer it relies on."""

from __future__ import annotations

import json

from azure.eventhub import EventData, EventHubProducerClient

from eventhubs_emulator import EmulatorConfig, HubConfig, load_config
from eventhubs_emulator.launcher import start_emulator_process
from tests.emulator.conftest import receive_all


def test_written_config_reads_back_as_the_same_config(tmp_path):
    config = EmulatorConfig(
        hubs=[
            HubConfig("a", partition_count=3, consumer_groups=["cg1"], retention_event_count=7),
            HubConfig("b", partition_count=1, retention_minutes=1.5, max_event_size=2048),
        ],
        namespace="ns2",
        key="other-key",
        retention_minutes=60,
        max_receivers_per_partition=0,
        websocket_port=0,
    )

    assert load_config(config.write(tmp_path / "Config.json")) == config


def test_a_config_without_extras_is_the_official_format(tmp_path):
    path = EmulatorConfig.single_hub("hub1", partition_count=2).write(tmp_path / "Config.json")

    document = json.loads(path.read_text())
    assert set(document["UserConfig"]) == {"NamespaceConfig", "LoggingConfig"}
    assert document["UserConfig"]["NamespaceConfig"][0]["Entities"] == [
        {"Name": "hub1", "PartitionCount": 2, "ConsumerGroups": []}
    ]


def test_emulator_process_serves_every_hub_and_stops(tmp_path):
    config = EmulatorConfig.many_hubs({"src": 2, "dst": 1})

    with start_emulator_process(config, tmp_path) as emulator:
        assert set(emulator.connection_strings) == {"src", "dst"}
        for hub, conn in emulator.connection_strings.items():
            with EventHubProducerClient.from_connection_string(conn) as producer:
                producer.send_batch([EventData(f"to {hub}")])
            assert [e.body_as_str() for _, e in receive_all(conn, expected=1)] == [f"to {hub}"]

    assert emulator.process.returncode == 0


def test_a_key_of_your_own_is_not_printed_and_the_launcher_still_connects(tmp_path):
    """The CLI prints the emulator's published development key, never a configured one (it is a
    secret then); the launcher builds working connection strings from the config it wrote."""
    import subprocess
    import sys

    config = EmulatorConfig.many_hubs({"src": 1}, key="my-own-Key-0123456789=")
    with start_emulator_process(config, tmp_path) as emulator:
        conn = emulator.connection_strings["src"]
        assert "SharedAccessKey=my-own-Key-0123456789=;" in conn
        with EventHubProducerClient.from_connection_string(conn) as producer:
            producer.send_batch([EventData("with my key")])
        assert [e.body_as_str() for _, e in receive_all(conn, expected=1)] == ["with my key"]
    (tmp_path / "printed").mkdir()
    path = config.write(tmp_path / "printed" / "Config.json")
    proc = subprocess.Popen(
        [sys.executable, "-m", "eventhubs_emulator", "--config", str(path), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        lines = [proc.stdout.readline() for _ in range(4)]
    finally:
        proc.terminate()
        proc.wait(30)
    printed = "".join(lines)
    assert "src: Endpoint=sb://127.0.0.1:" in printed and "SharedAccessKey=***;" in printed
    assert "my-own-Key" not in printed
    assert f"(SharedAccessKey: the one in {path}, not printed)" in printed
