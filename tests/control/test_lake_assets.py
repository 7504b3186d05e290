"""Lake tables as assets, without Airflow: names and URIs, the versions a run added, what was
announced before. The DAG factory's use is in tests/plugins/test_dag_factory.py, Airflow's own
events in tests/dags/test_airflow_ui.py."""

from __future__ import annotations

import os
import time

import pytest

from hubflow.checkpoints.file_sink_log import committed_batches, last_batch_id
from hubflow.lake_assets import (
    job_tables,
    last_announced,
    table_asset,
    table_versions,
    versions_added,
    versions_of_earlier_tries,
    versions_of_run,
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


def _file_sink_log(table, *names: str, written: float | None = None) -> None:
    """Files in ``table/_spark_metadata`` as Spark's file sink names them (contents unread)."""
    log = table / "_spark_metadata"
    log.mkdir(parents=True, exist_ok=True)
    for name in names:
        (log / name).write_text("v1\n", encoding="utf-8")
        if written is not None:
            os.utime(log / name, (written, written))


def test_a_parquet_outputs_versions_are_the_batch_ids_its_file_sink_committed(tmp_path) -> None:
    """``N.compact`` is batch N; Hadoop's ``.crc`` files, Spark's ``.tmp`` files being written and
    other names are no batch; no table, or no ``_spark_metadata`` or an empty one, has none."""
    table = tmp_path / "orders"
    assert last_batch_id(str(table)) is None, "no table yet"
    table.mkdir()
    assert last_batch_id(str(table)) is None, "no _spark_metadata yet"
    _file_sink_log(table)
    assert last_batch_id(str(table)) is None, "an empty _spark_metadata"
    _file_sink_log(
        table, "0", ".0.crc", "1", "9.compact", ".9.compact.crc", "10", ".11.8f2a-4c1b.tmp", "notes"
    )
    assert sorted(committed_batches(str(table))) == [0, 1, 9, 10]
    assert last_batch_id(str(table)) == 10
    _file_sink_log(table, "19.compact")
    assert last_batch_id(f"file://{table}") == 19, "a file:// URL reads the same folder"


def test_a_parquet_output_announces_the_batches_after_the_runs_before(tmp_path) -> None:
    """One writer per parquet output (its sink's query), so every batch after ``before`` is the
    run's: no commit tag. A run that committed no batch announces nothing."""
    out, bad = tmp_path / "orders", tmp_path / "quarantine"
    tables = job_tables([str(tmp_path / "no_delta_yet")], [str(out), str(bad)])
    assert [(t.name, t.kind) for t in tables] == [
        ("no_delta_yet", "delta"),
        ("orders", "parquet"),
        ("quarantine", "parquet"),
    ]
    assert tables[1].uri == f"file://{out}", "a parquet output's URI follows table_asset's rules"
    before = table_versions(tables)
    assert before == {t.path: None for t in tables}

    _file_sink_log(out, "0", "1", "2")
    _file_sink_log(bad, "0", "1", "2")
    first = {c.table.name: c.versions for c in versions_of_run(tables, before, "airflow:a/r/run_job/1")}
    assert first == {"orders": (0, 1, 2), "quarantine": (0, 1, 2)}

    before = table_versions(tables)
    assert before[str(out)] == 2
    assert versions_of_run(tables, before, "airflow:a/r2/run_job/1") == [], "nothing new, nothing said"
    _file_sink_log(out, "3", "4")
    assert versions_of_run(tables, before, "airflow:a/b/run_job/1", backfill=True) == [], (
        "a backfill writes the side table: batches meanwhile are a scheduled run's"
    )
    (second,) = versions_of_run(tables, before, "airflow:a/r3/run_job/1")
    assert (second.table.name, second.first, second.last, second.versions) == ("orders", 3, 4, (3, 4))
    assert second.extra("a", "scheduled") == {
        "job": "a",
        "from_version": 3,
        "to_version": 4,
        "run": "scheduled",
        "versions": [3, 4],
    }
    # The supervisor's way: batches since the last announced one (read back from Airflow's events).
    (streamed,) = versions_added(tables, {str(out): 2, str(bad): 2}, table_versions(tables))
    assert (streamed.table.name, streamed.first, streamed.last) == ("orders", 3, 4)


def test_a_retry_announces_the_parquet_batches_its_failed_tries_committed(tmp_path) -> None:
    """Batches up to the retry's ``before`` whose log files were written since the DAG run started
    are the earlier tries' (the output's only writer is the job's query)."""
    out = tmp_path / "orders"
    started = time.time()
    _file_sink_log(out, "0", "1", written=started - 3600)  # an earlier run's
    _file_sink_log(out, "2", "3", written=started + 5)  # the failed try's
    (table,) = job_tables([], [str(out)])
    before = table_versions([table])
    _file_sink_log(out, "4", written=started + 60)  # the retry's own, after its before

    (earlier,) = versions_of_earlier_tries([table], before, "airflow:a/r/run_job/", 2, int(started * 1000))
    assert (earlier.first, earlier.last, earlier.versions) == (2, 3, (2, 3))
    assert versions_of_earlier_tries([table], before, "airflow:a/r/run_job/", 1, int(started * 1000)) == []
    backfill = versions_of_earlier_tries(
        [table], before, "airflow:a/b/run_job/", 2, int(started * 1000), True
    )
    assert backfill == [], "a backfill's tries wrote no parquet output"
