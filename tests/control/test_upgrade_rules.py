"""The rules of an upgrade, without a driver: what the compatibility check calls a change, when a new
version is ready, the registry's upgrade keys and their messages, the upgrade-failed alert, and the
position a ``fresh`` upgrade gives the driver's Event Hubs sources."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hubflow.alerts import AlertPolicy, Findings, decide_alerts, read_findings
from hubflow.registry import RegistryError, load_registry
from hubflow.status import StatusFolder
from hubflow.supervision.upgrades import (
    STARTING_POSITION_ENV,
    DeployedVersion,
    PipelinePlan,
    Readiness,
    UpgradeMode,
    UpgradeRecord,
    committed_since,
    first_batch_failed,
    on_probation,
    parse_upgrade_from,
    plan_changes,
    plan_of,
    readiness,
    stale_deployed_files,
)
from tests.control.test_registry import _config, _entry, _write

T0 = datetime(2026, 11, 28, 6, 0, tzinfo=UTC)
BEFORE = PipelinePlan({"orders": "files", "rates": "delta"}, {"lake": "delta /lake/orders"})


@pytest.mark.parametrize(
    ("after", "changes"),
    [
        (BEFORE, []),
        (
            PipelinePlan({"orders": "files", "rates": "delta", "more": "files"}, BEFORE.sinks),
            ["sources ['orders', 'rates'] -> ['orders', 'rates', 'more']"],
        ),
        (
            PipelinePlan({"rates": "delta", "orders": "files"}, BEFORE.sinks),
            ["sources ['orders', 'rates'] -> ['rates', 'orders']"],
        ),
        (
            PipelinePlan({"orders": "eventhubs", "rates": "delta"}, BEFORE.sinks),
            ["source orders: kind files -> eventhubs"],
        ),
        (
            PipelinePlan(BEFORE.sources, {"lake": "parquet /lake/orders"}),
            ["sink lake: delta /lake/orders -> parquet /lake/orders"],
        ),
        (
            PipelinePlan(BEFORE.sources, {"lake": "delta /lake/orders", "audit": "delta /lake/audit"}),
            ["sink audit (delta /lake/audit) added"],
        ),
        (
            PipelinePlan(BEFORE.sources, {"silver": "delta /lake/orders"}),
            [
                "sink lake (delta /lake/orders) removed",
                "sink silver (delta /lake/orders) added",
                "first sink lake -> silver (the job's query)",
            ],
        ),
    ],
)
def test_what_the_compatibility_check_calls_a_change(after: PipelinePlan, changes: list[str]) -> None:
    assert plan_changes(BEFORE, after) == changes
    assert PipelinePlan.from_dict(json.loads(json.dumps(after.to_dict()))) == after


def test_the_plan_comes_from_the_config_as_the_job_reads_it(tmp_path: Path) -> None:
    plan = plan_of(_config(tmp_path), "files_to_lake")  # a built-in's config in its old keys
    assert list(plan.sources.values()) == ["files"]
    assert [target.split()[0] for target in plan.sinks.values()] == ["delta"]


def _record(**changes: object) -> UpgradeRecord:
    fields = {
        "before": "a" * 64,
        "after": "b" * 64,
        "mode": "last-state",
        "started_at": T0.isoformat(),
        "ready_by": (T0 + timedelta(minutes=10)).isoformat(),
        "committed_before": 7,
    }
    return UpgradeRecord(**{**fields, **changes})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("committed", "state", "heartbeat", "minutes", "found"),
    [
        (8, "running", None, 1, Readiness.READY),  # a batch committed after the backup's newest
        (7, "running", None, 1, Readiness.WAITING),  # nothing new yet
        (None, "running", None, 1, Readiness.WAITING),
        (7, "idle", (T0 + timedelta(seconds=30)).isoformat(), 1, Readiness.IDLE),  # nothing to read
        (7, "idle", (T0 - timedelta(seconds=30)).isoformat(), 1, Readiness.WAITING),  # the old driver's
        (7, "running", None, 10, Readiness.LATE),
        (8, "running", None, 11, Readiness.READY),  # a commit counts even when judged late
    ],
)
def test_readiness(committed, state, heartbeat, minutes, found) -> None:
    now = T0 + timedelta(minutes=minutes)
    assert readiness(_record(), now=now, committed=committed, state=state, heartbeat=heartbeat) == found


def test_ready_while_idle_is_on_probation_until_a_batch_commits() -> None:
    idle = _record(outcome="ready", first_batch_pending=True)
    state = {"upgrade": {**idle.to_dict(), "previous_fingerprint": {"digest": "a" * 64}}}
    assert on_probation(state, "b" * 64) == idle
    assert on_probation(state, "c" * 64) is None, "another version deployed since"
    assert on_probation({"upgrade": {**state["upgrade"], "first_batch_pending": False}}, "b" * 64) is None
    assert committed_since(idle, 8) and not committed_since(idle, 7) and not committed_since(idle, None)

    now = T0 + timedelta(days=2)  # long after ready_within: the death is judged, not found late
    again = first_batch_failed(idle, now=now, ready_within=timedelta(minutes=10))
    assert again.outcome == "in-progress" and not again.first_batch_pending
    assert again.ready_by == (now + timedelta(minutes=10)).isoformat()
    assert again.history[-1].startswith("ready while idle (nothing to read), then died at its first batch")
    assert readiness(again, now=now, committed=7, state=None, heartbeat=None) == Readiness.WAITING


def test_readiness_of_a_new_checkpoint_is_its_first_commit() -> None:
    fresh = _record(committed_before=None, mode="fresh")
    now = T0 + timedelta(minutes=1)
    assert readiness(fresh, now=now, committed=None, state="running", heartbeat=None) == Readiness.WAITING
    assert readiness(fresh, now=now, committed=0, state="running", heartbeat=None) == Readiness.READY


def test_upgrade_from_takes_a_named_position_or_an_enqueued_time() -> None:
    assert parse_upgrade_from("earliest") == "earliest" and parse_upgrade_from(" latest ") == "latest"
    assert parse_upgrade_from("2026-11-28T06:00:00Z") == T0
    with pytest.raises(
        ValueError, match="'yesterday' is not a position: write earliest, latest or an ISO-8601"
    ):
        parse_upgrade_from("yesterday")


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (
            {"upgrade_mode": "blue-green"},
            r"jobs\[orders\]\.upgrade_mode: Input should be 'last-state', 'stateless' or 'fresh'",
        ),
        ({"upgrade_mode": "fresh"}, r"jobs\[orders\]: .*upgrade_mode fresh .*add upgrade_from"),
        (
            {"upgrade_from": "latest"},
            r"jobs\[orders\]: .*upgrade_from is used by upgrade_mode fresh only \(this job's is last-state\)",
        ),
        (
            {"upgrade_mode": "fresh", "upgrade_from": "tuesday"},
            r"jobs\[orders\]\.upgrade_from: .*'tuesday' is not a position",
        ),
        ({"ready_within": "soon"}, r"jobs\[orders\]\.ready_within: .*'soon' is not a duration"),
        ({"ready_within": "0 seconds"}, r"jobs\[orders\]\.ready_within: .*must be longer than zero"),
        (
            {"max_upgrade_failures": 0},
            r"jobs\[orders\]\.max_upgrade_failures: Input should be greater than or equal to 1",
        ),
    ],
)
def test_bad_upgrade_keys_are_refused_naming_the_key(tmp_path: Path, keys: dict, message: str) -> None:
    entry = _entry(_config(tmp_path), **keys)
    with pytest.raises(RegistryError, match=message):
        load_registry(_write(tmp_path / "registry.yaml", {"jobs": [entry]}))


def test_the_upgrade_keys_default_to_last_state(tmp_path: Path) -> None:
    job = load_registry(_write(tmp_path / "registry.yaml", {"jobs": [_entry(_config(tmp_path))]})).job(
        "orders"
    )
    assert (job.upgrade_mode, job.upgrade_from, job.ready_within, job.max_upgrade_failures) == (
        "last-state",
        None,
        "10 minutes",
        3,
    )
    fresh = _entry(_config(tmp_path), upgrade_mode="fresh", upgrade_from="2026-11-28T06:00:00+00:00")
    job = load_registry(_write(tmp_path / "registry.yaml", {"jobs": [fresh]})).job("orders")
    assert job.upgrade_mode == "fresh" and job.ready_within_delta == timedelta(minutes=10)


def test_a_deployed_copy_starts_the_version_it_was(tmp_path: Path) -> None:
    module = tmp_path / "pipelines" / "shop" / "orders.py"
    module.parent.mkdir(parents=True)
    module.write_text("def run(orders):\n    return orders\n", encoding="utf-8")
    config = _config(tmp_path)
    fingerprint = {"digest": "c" * 64, "module": {"name": "shop.orders", "path": str(module)}}
    copy = DeployedVersion.of(fingerprint, config)
    assert copy is not None
    module.write_text("def run(orders):\n    return None  # version 2\n", encoding="utf-8")
    written, pipelines = DeployedVersion.from_dict(json.loads(json.dumps(copy.to_dict()))).materialize(
        tmp_path / "copy"
    )
    assert written.read_text() == config.read_text()
    assert (pipelines / "shop" / "orders.py").read_text() == "def run(orders):\n    return orders\n"
    package = {"digest": "d" * 64, "module": {"name": "shop", "path": str(module.with_name("__init__.py"))}}
    assert DeployedVersion.of(package, config) is None, "a package cannot be kept as one file"


def test_only_the_versions_a_rollback_can_go_back_to_keep_their_copies() -> None:
    a, b, c, d = ("a" * 64, "b" * 64, "c" * 64, "d" * 64)
    names = {f"version-{x[:12]}.json" for x in (a, b, c, d)} | {"status.json", "version-notes.json"}
    state = {"version": {"digest": d}, "previous_version": {"digest": c}}
    assert stale_deployed_files(names, state) == [f"version-{a[:12]}.json", f"version-{b[:12]}.json"]
    upgrading = {**state, "upgrade": UpgradeRecord(b, d, "last-state", "t", "t").to_dict()}
    assert stale_deployed_files(names, upgrading) == [f"version-{a[:12]}.json"]
    assert stale_deployed_files(names, {}) == sorted(
        n for n in names if n.startswith("version-") and "notes" not in n
    )


def test_a_failed_upgrade_pages_once_and_resolves(tmp_path: Path) -> None:
    policy = AlertPolicy()
    text = "job clicks: the upgrade from version aaaaaaaaaaaa to bbbbbbbbbbbb was rolled back because ..."
    messages, state = decide_alerts(None, Findings("clicks", upgrade_failure=text), policy, T0)
    assert [(m.kind, m.status) for m in messages] == [("upgrade-failed", "firing")]
    assert f"Upgrade: {text}" in messages[0].text
    assert decide_alerts(state, Findings("clicks", upgrade_failure=text), policy, T0)[0] == []
    assert decide_alerts(state, Findings("clicks"), policy, T0)[0] == [], "not looked at: no change"
    messages, _ = decide_alerts(state, Findings("clicks", upgrade_failure=""), policy, T0)
    assert [(m.kind, m.status) for m in messages] == [("upgrade-failed", "resolved")]

    folder = StatusFolder(str(tmp_path / "status" / "clicks"))
    folder.write_json("supervisor.json", {"upgrade": {"outcome": "rolled-back", "text": text}})
    assert read_findings("clicks", folder).upgrade_failure == text
    folder.write_json("supervisor.json", {"upgrade": {"outcome": "ready", "text": "upgraded"}})
    assert read_findings("clicks", folder).upgrade_failure == ""


def test_a_fresh_upgrades_position_reaches_the_event_hubs_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hubflow_jobs.eventhubs_config import EventHubSourceConfig
    from hubflow_jobs.eventhubs_kafka import EventHubsKafkaSourceConfig

    connection = (
        "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=hub"
    )
    monkeypatch.setenv("HUB", connection)
    native = EventHubSourceConfig(connection_string_env="HUB")
    kafka = EventHubsKafkaSourceConfig(connection_string_env="HUB")
    assert json.loads(native.spark_options()["eventhubs.startingPosition"])["offset"] == "-1"
    assert kafka.spark_options()["startingOffsets"] == "earliest"

    monkeypatch.setenv(STARTING_POSITION_ENV, "2026-11-28T06:00:00Z")
    position = json.loads(native.spark_options()["eventhubs.startingPosition"])
    assert position["enqueuedTime"].startswith("2026-11-28T06:00:00"), position
    options = kafka.spark_options()
    assert "startingOffsets" not in options and options["startingTimestamp"] == str(
        int(T0.timestamp() * 1000)
    )

    monkeypatch.setenv(STARTING_POSITION_ENV, "latest")
    assert json.loads(native.spark_options()["eventhubs.startingPosition"])["offset"] == "@latest"
    assert kafka.spark_options()["startingOffsets"] == "latest"


def test_the_upgrades_example_of_the_runbook_loads_as_written(tmp_path: Path) -> None:
    """docs/operations.md "Upgrades": its registry entry through the real loader."""
    import re

    from hubflow.repository import REPO_ROOT

    doc = (REPO_ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    section = doc.split("\n### Upgrades\n", 1)[1].split("\n### ", 1)[0]
    (example,) = re.findall(r"```yaml\n(.*?)```", section, re.S)
    path = tmp_path / "registry.yaml"
    path.write_text(example, encoding="utf-8")
    job = load_registry(path).job("clicks")
    assert (job.upgrade_mode, job.ready_within_delta, job.max_upgrade_failures) == (
        "last-state",
        timedelta(minutes=10),
        3,
    )
    modes = re.findall(r"^\| `([a-z-]+)`(?: \(default\))? \|", section, re.M)
    assert modes == [str(mode) for mode in UpgradeMode], "the table names every mode, in order"
