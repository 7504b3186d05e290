"""register_data_source: a starting stream no longer changes the map other threads copy (#25).

Spark 4.2 lets a starting stream add variables to the registered source's shared environment map
while another thread may be copying it for load(), which failed the aggregate job's second query
with ConcurrentModificationException (ci8). A put on a key already present is not a structural
change, so the map's key set staying the same across a query start is what makes it safe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pyspark_eventhubs import DefaultSource, register_data_source
from pyspark_eventhubs.registration import registered_environment, stream_runner_environment

from .conftest import Hub
from .test_stream_read import EARLIEST, read_bodies, run_available_now

pytestmark = pytest.mark.integration


def _keys(spark: Any) -> set[str]:
    return set(registered_environment(spark, DefaultSource.name()).keySet().toArray())


def test_a_starting_stream_adds_no_key_to_the_map_shared_with_other_threads(
    eh_spark: Any, hub: Hub, tmp_path: Path
) -> None:
    sent = hub.send_per_partition({"0": 3, "1": 3})
    options = hub.options(**{"eventhubs.startingPosition": EARLIEST})
    added = set(stream_runner_environment(eh_spark))
    try:
        # Spark's own registration: the first query's start adds the stream runner's variables.
        eh_spark.dataSource.register(DefaultSource)
        plain = _keys(eh_spark)
        run_available_now(eh_spark, options, tmp_path / "ckpt1", tmp_path / "out1")
        assert _keys(eh_spark) - plain == added, "Spark changed what a starting stream adds"
    finally:
        register_data_source(eh_spark, DefaultSource)

    before = _keys(eh_spark)
    assert added <= before
    run_available_now(eh_spark, options, tmp_path / "ckpt2", tmp_path / "out2")
    assert _keys(eh_spark) == before
    assert sorted(read_bodies(eh_spark, tmp_path / "out2")) == sorted(sent)
