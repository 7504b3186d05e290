"""Lake tables as assets, without Airflow: names and URIs, the versions a run added, what was
announced before. The DAG factory's use is in tests/plugins/test_dag_factory.py, Airflow's own
events in tests/dags/test_airflow_ui.py."""

from __future__ import annotations

import pytest

from hubflow_plugins.core.lake_assets import (
    last_announced,
    table_asset,
    versions_added,
    versions_tagged,
)


def test_a_table_is_named_after_its_folder_and_its_uri_names_where_it_is() -> None:
    local = table_asset("/lake/silver/telemetry_bronze/")
    assert (local.name, local.uri) == ("telemetry_bronze", "file:///lake/silver/telemetry_bronze")
    assert table_asset("file:///lake/orders").uri == "file:///lake/orders"
    cloud = table_asset("abfss://lake@acct.dfs.core.windows.net/bronze/telemetry_bronze")
    assert (cloud.name, cloud.uri) == (
        "telemetry_bronze",
        "abfss://lake@acct.dfs.core.windows.net/bronze/telemetry_bronze",
    )
    assert table_asset("wasbs://lake@acct.blob.core.windows.net/orders").name == "orders"
    with pytest.raises(ValueError, match="'lake/orders' is relative"):
        table_asset("lake/orders")


def test_only_tables_whose_version_moved_forward_are_announced_with_the_versions_in_between() -> None:
    new, moved, still, restored, absent = (table_asset(f"/lake/{n}") for n in "abcde")
    tables = [new, moved, still, restored, absent]
    before = {new.path: None, moved.path: 3, still.path: 7, restored.path: 9, absent.path: None}
    after = {new.path: 1, moved.path: 5, still.path: 7, restored.path: 4, absent.path: None}

    added = {
        change.table.name: (change.first, change.last) for change in versions_added(tables, before, after)
    }

    assert added == {"a": (0, 1), "b": (4, 5)}


def test_the_last_announced_version_of_each_table_comes_from_earlier_events() -> None:
    events = [
        ("file:///lake/a", {"to_version": 4}),
        ("file:///lake/a", {"to_version": 9}),
        ("file:///lake/a", {"to_version": 6}),
        ("file:///lake/b", {"to_version": 2}),
        ("file:///lake/c", {"note": "emitted by someone else"}),
        ("file:///lake/c", None),
    ]
    assert last_announced(events) == {"file:///lake/a": 9, "file:///lake/b": 2}


def test_a_run_announces_only_the_commits_that_carry_its_tag(tmp_path) -> None:
    """A run's commits carry its tag (commitInfo.userMetadata, set through Spark's conf by the
    operator); a concurrent writer's commits in between, or an earlier run's, are not its own. The
    table is written with delta-rs here, a second Delta writer."""
    import pyarrow as pa
    from deltalake import CommitProperties, write_deltalake

    path = str(tmp_path / "orders")
    rows = pa.table({"id": [1]})

    def commit(tag: str | None) -> None:
        properties = CommitProperties(custom_metadata={"userMetadata": tag}) if tag else None
        write_deltalake(path, rows, mode="append", commit_properties=properties)

    commit("airflow:a/run1/run_job/1")  # version 0, before the run
    table = table_asset(path)
    before = {path: 0}
    for tag in ("airflow:a/run2/run_job/1", None, "airflow:a/run2/run_job/1", "airflow:a/run3/run_job/1"):
        commit(tag)  # versions 1 (ours), 2 (the stream), 3 (ours), 4 (another run)

    (mine,) = versions_tagged([table], before, "airflow:a/run2/run_job/1")
    assert (mine.first, mine.last, mine.versions) == (1, 3, (1, 3))
    assert mine.extra("a", "backfill")["versions"] == [1, 3]
    assert versions_tagged([table], before, "airflow:a/run9/run_job/1") == []
    assert versions_tagged([table_asset(str(tmp_path / "none"))], {}, "x") == [], "no table yet"
