"""Config validation: every mistake is one message naming the key, and the job exits 2 before Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from hubflow.config import ConfigError, declared_column_names, load_config
from hubflow.durations import parse_duration
from hubflow.status.exit_codes import EXIT_CONFIG_ERROR
from hubflow_jobs.builtins.files_to_lake import FilesToLakeConfig
from hubflow_jobs.pipeline.job import run_builtin

from .helpers import files_to_lake_config, landing_config, python_job, write_config


def _load(tmp_path: Path, **overrides) -> FilesToLakeConfig:
    return files_to_lake_config(write_config(tmp_path / "job.yaml", landing_config(tmp_path, **overrides)))


def _error(tmp_path: Path, **overrides) -> str:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, **overrides)
    return str(caught.value)


def test_valid_config_gives_locations_named_after_the_job(tmp_path: Path) -> None:
    config = _load(tmp_path, trigger={"availableNow": False, "processingTime": "30 seconds"})
    assert config.checkpoint_location == f"{tmp_path}/checkpoints/files_to_lake"
    assert config.status_dir == f"{tmp_path}/status/files_to_lake"
    assert config.trigger.spark_kwargs() == {"processingTime": "30000 milliseconds"}
    assert config.spark_conf["spark.ui.enabled"] == "false"
    assert config.spark_conf["spark.sql.shuffle.partitions"] == "2"
    assert config.runtime.seconds("poll_interval") == 0.2


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            {"source": {"max_files_per_trigger": 0}},
            "jobs config error: source.max_files_per_trigger: must be > 0",
        ),
        ({"sourc": {}}, "jobs config error: sourc: unknown key"),
        ({"source": {"archive": "/x"}}, "jobs config error: source.archive: unknown key"),
        (
            {"trigger": {"processingTime": "thirty"}},
            "jobs config error: trigger.processingTime: 'thirty' is not a duration",
        ),
        (
            {"runtime": {"stop_timeout": "0 s"}},
            "jobs config error: runtime.stop_timeout: '0 s' must be longer than zero",
        ),
        (
            {"runtime": {"stale_lock_after": "2 minutes"}},
            "jobs config error: runtime.stale_lock_after: renamed: the lock is a lease now; set "
            "lease_duration instead",
        ),
        (
            {"runtime": {"lease_duration": "30 s", "lease_fence_after": "40 s"}},
            "jobs config error: runtime.lease_fence_after: the lease timings must satisfy "
            "lease_refresh_interval < lease_fence_after < lease_duration; got 10 s, 40 s and 30 s",
        ),
        (
            {"trigger": {"availableNow": True, "processingTime": "1 s"}},
            "jobs config error: trigger: set exactly one",
        ),
        ({"name": "Files-To-Lake"}, "jobs config error: name: 'Files-To-Lake' must match"),
        ({"sink": {"output_path": ""}}, "jobs config error: sink.output_path: must not be empty"),
        ({"source": {"format": "xml"}}, "jobs config error: source.format: 'xml' is not one of"),
        (
            {"source": {"options": {"mode": "FAILFAST"}}},
            "jobs config error: source.options.mode: is set by the job",
        ),
        (
            {"source": {"required_columns": ["nope"]}},
            "jobs config error: source.required_columns: 'nope' is not",
        ),
    ],
)
def test_each_mistake_is_one_message_naming_the_key(tmp_path: Path, overrides: dict, expected: str) -> None:
    message = _error(tmp_path, **overrides)
    assert message.startswith(expected), message
    assert "\n" not in message


def test_missing_keys_and_paths_are_named(tmp_path: Path) -> None:
    config = landing_config(tmp_path)
    del config["checkpoint_root"]
    with pytest.raises(ConfigError, match=r"^jobs config error: checkpoint_root: is required$"):
        files_to_lake_config(write_config(tmp_path / "job.yaml", config))
    message = _error(tmp_path, source={"path": str(tmp_path / "nowhere")})
    assert message.startswith("jobs config error: source.path: landing folder")
    assert "does not exist" in message
    message = _error(tmp_path, source={"archive_dir": str(tmp_path / "landing" / "archive")})
    assert message.startswith("jobs config error: source.archive_dir: ")


def test_several_mistakes_share_one_line(tmp_path: Path) -> None:
    message = _error(tmp_path, source={"max_files_per_trigger": -1}, status_root="")
    assert message.count("jobs config error") == 1
    assert "status_root: must not be empty" in message
    assert "source.max_files_per_trigger: must be > 0" in message


def test_main_exits_2_before_spark_starts(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config_path = write_config(
        tmp_path / "job.yaml", landing_config(tmp_path, source={"max_files_per_trigger": 0})
    )
    code = run_builtin("files_to_lake", ["--config", str(config_path)])
    assert code == EXIT_CONFIG_ERROR
    assert not (tmp_path / "status").exists(), "nothing may be created for an invalid config"


def test_entry_script_exits_2_and_says_which_key(tmp_path: Path) -> None:
    config_path = write_config(
        tmp_path / "job.yaml", landing_config(tmp_path, trigger={"processingTime": "soon"})
    )
    result = python_job(config_path)
    assert result.returncode == 2, result.stderr
    last_line = result.stderr.strip().splitlines()[-1]
    assert "jobs config error: trigger.processingTime: 'soon' is not a duration" in last_line


def test_unreadable_and_non_mapping_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        files_to_lake_config(tmp_path / "absent.yaml")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        files_to_lake_config(tmp_path / "list.yaml")


def test_durations_and_schema_names() -> None:
    assert parse_duration("30 seconds").total_seconds() == 30
    assert parse_duration("500 ms").total_seconds() == 0.5
    assert parse_duration("2 min").total_seconds() == 120
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("2 fortnights")
    assert declared_column_names(
        "id BIGINT, tags ARRAY<STRING>, m MAP<STRING, INT>, `odd name` DECIMAL(10, 2)"
    ) == [
        "id",
        "tags",
        "m",
        "odd name",
    ]


def test_example_config_is_valid() -> None:
    example = Path(__file__).resolve().parents[2] / "jobs" / "configs" / "files_to_lake.yaml"
    config = files_to_lake_config(example)
    assert config.name == "files_to_lake"
    assert config.params["required_columns"] == ["order_id", "ordered_at"]


def test_eventhubs_example_config_is_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    from hubflow_jobs.builtins.eventhubs_to_lake import EventHubsToLakeConfig

    monkeypatch.setenv(
        "ORDERS_EVENTHUBS_CONNECTION", "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=s"
    )
    example = Path(__file__).resolve().parents[2] / "jobs" / "configs" / "eventhubs_to_lake.yaml"
    config = load_config(example, EventHubsToLakeConfig)
    assert config.sources["events"].spark_options()["eventhubs.name"] == "orders"
    assert config.sources["events"].spark_options()["eventhubs.receiverTimeout"] == "PT30S"


def _eventhubs_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: dict) -> Path:
    monkeypatch.setenv("HUB_CONNECTION", "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=s")
    config = {
        "name": "hub_job",
        "trigger": {"availableNow": True},
        "checkpoint_root": str(tmp_path / "checkpoints"),
        "status_root": str(tmp_path / "status"),
        "source": {"connection_string_env": "HUB_CONNECTION", **source},
        "sink": {"output_path": str(tmp_path / "lake")},
    }
    return write_config(tmp_path / "hub_job.yaml", config)


def test_the_hub_is_named_by_eventhub_name_and_the_old_key_still_works_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hubflow_jobs.builtins.eventhubs_to_lake import EventHubsToLakeConfig

    config = load_config(
        _eventhubs_source(tmp_path, monkeypatch, {"eventhub_name": "orders"}), EventHubsToLakeConfig
    )
    assert config.sources["events"].spark_options()["eventhubs.name"] == "orders"

    old = _eventhubs_source(tmp_path, monkeypatch, {"event_hub": "orders"})
    with pytest.warns(
        DeprecationWarning, match="source.event_hub is deprecated; rename it to source.eventhub_name"
    ):
        config = load_config(old, EventHubsToLakeConfig)
    assert config.sources["events"].spark_options()["eventhubs.name"] == "orders"

    both = _eventhubs_source(tmp_path, monkeypatch, {"event_hub": "a", "eventhub_name": "b"})
    with pytest.raises(ConfigError) as error:
        load_config(both, EventHubsToLakeConfig)
    assert str(error.value) == (
        "jobs config error: source.event_hub: is the deprecated name of source.eventhub_name; "
        "keep only source.eventhub_name"
    )
