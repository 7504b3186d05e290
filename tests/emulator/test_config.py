"""Config.json parsing: the official emulator's format, extras, and errors that name the field."""

from __future__ import annotations

import json

import pytest

from eventhubs_emulator import ConfigError, EmulatorConfig, load_config

OFFICIAL = {
    "UserConfig": {
        "NamespaceConfig": [
            {
                "Type": "EventHub",
                "Name": "emulatorNs1",
                "Entities": [
                    {"Name": "eh1", "PartitionCount": "2", "ConsumerGroups": [{"Name": "cg1"}]},
                    {"Name": "eh2", "PartitionCount": 4, "ConsumerGroups": []},
                ],
            }
        ],
        "LoggingConfig": {"Type": "File"},
    }
}


def _write(tmp_path, data) -> str:
    path = tmp_path / "Config.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return str(path)


def test_official_config_loads_with_defaults(tmp_path):
    cfg = load_config(_write(tmp_path, OFFICIAL))
    assert [(h.name, h.partition_count) for h in cfg.hubs] == [("eh1", 2), ("eh2", 4)]
    assert cfg.hub("EH1").all_consumer_groups() == ["$Default", "cg1"]
    assert (cfg.key_name, cfg.key) == ("RootManageSharedAccessKey", "SAS_KEY_VALUE")
    assert cfg.max_event_size == 1024 * 1024
    assert cfg.retention_minutes is None


def test_extras_are_read(tmp_path):
    data = json.loads(json.dumps(OFFICIAL))
    data["UserConfig"]["EmulatorExtras"] = {
        "SharedAccessKeyName": "policy",
        "SharedAccessKey": "secret",
        "MaxEventSizeBytes": 2048,
        "RetentionMinutes": 60,
        "Tier": "Premium",
    }
    data["UserConfig"]["NamespaceConfig"][0]["Entities"][1]["RetentionEventCount"] = 100
    cfg = load_config(_write(tmp_path, data))
    assert (cfg.key_name, cfg.key, cfg.max_event_size, cfg.retention_minutes, cfg.tier) == (
        "policy",
        "secret",
        2048,
        60,
        "Premium",
    )
    assert load_config(_write(tmp_path, cfg.to_document())).tier == "Premium", "written back as read"
    assert cfg.hub("eh2").retention_event_count == 100


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d["UserConfig"].pop("NamespaceConfig"), "UserConfig.NamespaceConfig"),
        (lambda d: d["UserConfig"]["NamespaceConfig"][0]["Entities"][0].pop("Name"), "Entities[0].Name"),
        (
            lambda d: d["UserConfig"]["NamespaceConfig"][0]["Entities"][1].update(PartitionCount=0),
            "Entities[1].PartitionCount",
        ),
        (
            lambda d: d["UserConfig"]["NamespaceConfig"][0]["Entities"][1].update(PartitionCount="many"),
            "Entities[1].PartitionCount",
        ),
        (
            lambda d: d["UserConfig"]["NamespaceConfig"][0]["Entities"][1].update(Name="eh1"),
            "Entities[1].Name",
        ),
        (
            lambda d: d["UserConfig"]["NamespaceConfig"][0]["Entities"][0]["ConsumerGroups"][0].pop("Name"),
            "ConsumerGroups[0].Name",
        ),
        (lambda d: d["UserConfig"].update(EmulatorExtras={"RetentionMinutes": -1}), "RetentionMinutes"),
        (
            lambda d: d["UserConfig"].update(EmulatorExtras={"Tier": "Basic"}),
            "EmulatorExtras.Tier: must be one of Standard, Premium, Dedicated",
        ),
        (
            lambda d: d["UserConfig"]["NamespaceConfig"][0].update(Type="ServiceBus"),
            "NamespaceConfig[0].Type",
        ),
    ],
)
def test_invalid_config_names_the_field(tmp_path, mutate, field):
    data = json.loads(json.dumps(OFFICIAL))
    mutate(data)
    with pytest.raises(ConfigError, match=field.replace("[", r"\[").replace("]", r"\]")):
        load_config(_write(tmp_path, data))


def test_unreadable_or_invalid_json(tmp_path):
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(_write(tmp_path, "{nope"))
    with pytest.raises(ConfigError, match="cannot be read"):
        load_config(tmp_path / "missing.json")


def test_single_hub_helper():
    cfg = EmulatorConfig.single_hub("hub1", partition_count=4, consumer_groups=["cg1"])
    assert cfg.hub("hub1").partition_count == 4
    with pytest.raises(ConfigError, match="PartitionCount"):
        EmulatorConfig.single_hub("hub1", partition_count=0)


def test_websocket_port_extra(tmp_path):
    data = json.loads(json.dumps(OFFICIAL))
    assert load_config(_write(tmp_path, data)).websocket_port is None
    data["UserConfig"]["EmulatorExtras"] = {"WebSocketPort": 0}
    assert load_config(_write(tmp_path, data)).websocket_port == 0
    for bad, match in ((70000, "must be a port number 0-65535"), ("80", "must be of type int")):
        data["UserConfig"]["EmulatorExtras"] = {"WebSocketPort": bad}
        with pytest.raises(ConfigError, match=f"UserConfig.EmulatorExtras.WebSocketPort: {match}"):
            load_config(_write(tmp_path, data))


def test_receiver_limit_extra(tmp_path):
    data = json.loads(json.dumps(OFFICIAL))
    assert load_config(_write(tmp_path, data)).max_receivers_per_partition == 5
    data["UserConfig"]["EmulatorExtras"] = {"MaxReceiversPerPartition": 0}
    assert load_config(_write(tmp_path, data)).max_receivers_per_partition == 0
    data["UserConfig"]["EmulatorExtras"] = {"MaxReceiversPerPartition": -1}
    with pytest.raises(ConfigError, match="MaxReceiversPerPartition"):
        load_config(_write(tmp_path, data))
