"""Binding a pipeline function to its config by parameter name, and checking what it returns.

Each mistake a user can make is one :class:`PipelineError` naming the reference, the parameter or
sink, and what would have been valid; the same function runs on batch DataFrames, so a user's unit
test needs no streaming.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from hubflow_jobs.pipeline import PipelineError
from hubflow_jobs.pipeline.binding import bind, load_function, sink_frames

from .pipelines_support import write_module as _module

#: A user's pipeline module: a params model, the function, and a helper that is not a pipeline.
HOT_DEVICES = '''
from pydantic import BaseModel, Field
from pyspark.sql import functions as F


class Params(BaseModel):
    threshold: float
    unit: str = "C"
    sites: list[str] = Field(min_length=1)


def transform(telemetry, devices, params: Params, spark=None):
    """Readings above the threshold at the listed sites, with each device's name."""
    hot = telemetry.where((F.col("reading") > params.threshold) & F.col("site").isin(params.sites))
    named = hot.join(devices, "device_id")
    return named.select("device_id", "name", "reading", F.lit(params.unit).alias("unit"))


def split(telemetry, params: dict):
    """Hot rows and every row, for two sinks."""
    return {"hot": telemetry.where(F.col("reading") > params["threshold"]), "all": telemetry}


def _private(telemetry):
    return telemetry
'''


def _error(call: Any, *args: Any) -> str:
    with pytest.raises(PipelineError) as caught:
        call(*args)
    return str(caught.value)


def test_parameters_are_bound_by_name_and_params_validated_by_the_model(pipelines: Path) -> None:
    _module(pipelines, "bind_hot_devices", HOT_DEVICES)
    function = load_function("bind_hot_devices:transform")
    binding = bind(function, "bind_hot_devices:transform", ["devices", "telemetry"])

    assert binding.sources == ("telemetry", "devices")  # the function's order
    assert binding.takes_params and binding.takes_spark
    assert binding.params_model is not None and binding.params_model.__name__ == "Params"
    params = binding.validated_params({"threshold": "80", "sites": ["a"]})
    assert (params.threshold, params.unit, params.sites) == (80.0, "C", ["a"])

    seen: dict[str, Any] = {}

    def spy(telemetry: Any, params: dict, spark: Any) -> str:
        seen.update(telemetry=telemetry, params=params, spark=spark)
        return "result"

    spied = bind(spy, "spy:spy", ["telemetry"])
    assert spied.params_model is None
    assert spied.call({"telemetry": "T", "unused": "U"}, {"k": 1}, spark="S") == "result"
    assert seen == {"telemetry": "T", "params": {"k": 1}, "spark": "S"}


def test_params_that_do_not_fit_the_model_name_each_key(pipelines: Path) -> None:
    _module(pipelines, "bind_params", HOT_DEVICES)
    binding = bind(load_function("bind_params:transform"), "bind_params:transform", ["telemetry", "devices"])

    message = _error(binding.validated_params, {"threshold": "hot", "sites": [], "colour": "red"})

    assert message.startswith("pipeline 'bind_params:transform': params do not fit Params: ")
    assert "params.threshold: Input should be a valid number" in message
    assert "params.sites: List should have at least 1 item" in message
    assert "params.colour: unknown key; Params takes threshold, unit, sites" in message, "typo ignored"
    missing = _error(binding.validated_params, {})
    assert "params.threshold: Field required" in missing and "params.sites: Field required" in missing


class Loose(BaseModel):
    """A params model that takes keys it does not declare."""

    model_config = ConfigDict(extra="allow")
    threshold: float = 1.0


def _loose(telemetry: Any, params: Loose) -> Any:
    return params


def test_a_params_model_that_allows_more_keys_gets_them() -> None:
    binding = bind(_loose, "loose:transform", ["telemetry"])
    params = binding.validated_params({"threshold": 2, "colour": "red"})
    assert (params.threshold, params.colour) == (2.0, "red")


def test_a_parameter_that_names_no_source_lists_the_valid_names() -> None:
    def transform(telemetry: Any, devcies: Any, params: dict) -> Any:
        return telemetry

    message = _error(bind, transform, "typo:transform", ["telemetry", "devices"])

    assert message == (
        "pipeline 'typo:transform': parameter 'devcies' names no source of the config; valid names: "
        "telemetry, devices, params, spark, context; source 'devices' of the config is taken by no "
        "parameter; add a parameter of that name or remove the source"
    )


def test_an_unused_source_is_refused_and_a_defaulted_extra_parameter_is_left_alone() -> None:
    def transform(telemetry: Any, limit: int = 10) -> Any:
        return telemetry

    assert bind(transform, "m:transform", ["telemetry"]).sources == ("telemetry",)
    message = _error(bind, transform, "m:transform", ["telemetry", "devices"])
    assert message == (
        "pipeline 'm:transform': source 'devices' of the config is taken by no parameter; add a "
        "parameter of that name or remove the source"
    )


@pytest.mark.parametrize(
    ("source", "bad"),
    [
        ("def f(telemetry, *frames): return telemetry", "frames"),
        ("def f(telemetry, **frames): return telemetry", "frames"),
        ("def f(telemetry, /): return telemetry", "telemetry"),
    ],
)
def test_star_args_and_positional_only_parameters_are_refused(source: str, bad: str) -> None:
    namespace: dict[str, Any] = {}
    exec(source, namespace)

    message = _error(bind, namespace["f"], "m:f", ["telemetry"])

    assert f"parameter {bad!r} must be an ordinary named parameter (no *args, **kwargs or /)" in message


def test_a_missing_module_says_where_it_was_looked_for(pipelines: Path) -> None:
    message = _error(load_function, "no_such_pipeline:transform")
    assert message == (
        f"pipeline 'no_such_pipeline:transform': no module 'no_such_pipeline' in {pipelines} or the "
        f"installed packages; create {pipelines / 'no_such_pipeline.py'} or fix the name"
    )
    _module(pipelines, "no_such_pipeline", "def transform(telemetry):\n    return telemetry\n")
    assert load_function("no_such_pipeline:transform").__name__ == "transform", "found once written"


def test_a_module_that_fails_to_import_says_why_and_where(pipelines: Path) -> None:
    _module(pipelines, "bind_broken", "import json\n\nLIMIT = json.loads('{nope')\n")
    message = _error(load_function, "bind_broken:transform")
    assert message.startswith(
        f"pipeline 'bind_broken:transform': importing its module failed ({pipelines / 'bind_broken.py'}, "
        "line 3): JSONDecodeError: "
    )

    # A missing dependency is the module's failure, not a missing pipeline module.
    _module(pipelines, "bind_needs", "import bind_needs_helper_not_installed\n")
    message = _error(load_function, "bind_needs:transform")
    assert message == (
        f"pipeline 'bind_needs:transform': importing its module failed ({pipelines / 'bind_needs.py'}, "
        "line 1): ModuleNotFoundError: No module named 'bind_needs_helper_not_installed'"
    )


def test_a_missing_function_lists_the_module_functions(pipelines: Path) -> None:
    _module(pipelines, "bind_funcs", HOT_DEVICES)
    message = _error(load_function, "bind_funcs:transfrom")
    assert message == (
        f"pipeline 'bind_funcs:transfrom': module bind_funcs ({pipelines / 'bind_funcs.py'}) has no "
        "function 'transfrom'; its functions: split, transform"
    )
    assert "write it as module:function" in _error(load_function, "bind_funcs")
    assert "write it as module:function" in _error(load_function, "bind_funcs:a:b")


def test_sink_frames_takes_one_frame_or_a_mapping_of_exactly_the_sinks(spark: Any) -> None:
    frame, other = spark.range(3), spark.range(5)

    assert sink_frames(frame, "m:f", ["lake"]) == {"lake": frame}
    assert sink_frames({"all": other, "hot": frame}, "m:f", ["hot", "all"]) == {"hot": frame, "all": other}
    assert _error(sink_frames, {"hot": frame}, "m:f", ["hot", "all"]) == (
        "pipeline 'm:f': sink 'all' of the config is not returned; the config's sinks: hot, all"
    )
    assert _error(sink_frames, {"hot": frame, "cold": other}, "m:f", ["hot"]) == (
        "pipeline 'm:f': it returns 'cold', which the config does not declare; the config's sinks: hot"
    )
    assert _error(sink_frames, frame, "m:f", ["hot", "all"]) == (
        "pipeline 'm:f': the config declares 2 sinks (hot, all); return a mapping of sink name to DataFrame"
    )
    assert _error(sink_frames, [frame], "m:f", ["hot"]) == (
        "pipeline 'm:f': sink 'hot' got list, not a DataFrame"
    )
    assert _error(sink_frames, {"hot": None}, "m:f", ["hot"]) == (
        "pipeline 'm:f': sink 'hot' got NoneType, not a DataFrame"
    )


def test_the_function_runs_on_batch_frames_as_a_users_unit_test_would(spark: Any, pipelines: Path) -> None:
    _module(pipelines, "bind_unit", HOT_DEVICES)
    binding = bind(load_function("bind_unit:transform"), "bind_unit:transform", ["telemetry", "devices"])
    telemetry = spark.createDataFrame(
        [(1, "a", 79.0), (1, "a", 81.5), (2, "a", 90.0), (2, "b", 95.0), (3, "a", 85.0)],
        "device_id INT, site STRING, reading DOUBLE",
    )
    devices = spark.createDataFrame([(1, "boiler"), (2, "pump")], "device_id INT, name STRING")

    result = binding.call(
        {"telemetry": telemetry, "devices": devices}, {"threshold": 80, "sites": ["a"]}, spark
    )
    (frame,) = sink_frames(result, binding.reference, ["hot"]).values()

    assert not frame.isStreaming
    assert sorted(tuple(row) for row in frame.collect()) == [(1, "boiler", 81.5, "C"), (2, "pump", 90.0, "C")]

    split = bind(load_function("bind_unit:split"), "bind_unit:split", ["telemetry"])
    frames = sink_frames(
        split.call({"telemetry": telemetry}, {"threshold": 89}), "bind_unit:split", ["hot", "all"]
    )
    assert sorted(row["reading"] for row in frames["hot"].collect()) == [90.0, 95.0]
    assert frames["all"].count() == 5


def test_a_function_that_takes_context_reads_its_sources_through_it() -> None:
    def own(context: Any, params: dict) -> Any:
        return context

    binding = bind(own, "own:start", ["orders", "devices"])
    assert binding.takes_context and binding.sources == () and binding.takes_params
    assert binding.call({}, {"k": 1}, spark="S", context="C") == "C"

    def mixed(context: Any, orders: Any, spark: Any) -> Any:
        return context

    message = _error(bind, mixed, "own:mixed", ["orders"])
    assert message == (
        "pipeline 'own:mixed': a function that takes 'context' starts its own queries and reads its "
        "sources and session through it (context.read(name), context.spark); remove parameter "
        "'orders', 'spark'"
    )


def test_columns_and_quarantine_columns_shape_each_table_and_a_missing_one_is_named(spark: Any) -> None:
    from hubflow_jobs.pipeline import QUARANTINE_REASON
    from hubflow_jobs.pipeline.declarations import LakeSink
    from hubflow_jobs.pipeline.streams import check_columns, output_rows, quarantine_rows

    frame = spark.createDataFrame(
        [("{bad", None, "not json"), ('{"id": 1}', 1, None)],
        f"raw STRING, id BIGINT, {QUARANTINE_REASON} STRING",
    )
    plain = LakeSink(kind="delta", output_path="/o", quarantine_path="/q")
    assert output_rows(frame, plain).collect() == [('{"id": 1}', 1)]
    assert quarantine_rows(frame, plain).columns == ["raw", "id", QUARANTINE_REASON]
    shaped = LakeSink(
        kind="delta", output_path="/o", quarantine_path="/q", columns=["id"], quarantine_columns=["raw"]
    )
    assert [tuple(r) for r in output_rows(frame, shaped).collect()] == [(1,)]
    assert [tuple(r) for r in quarantine_rows(frame, shaped).collect()] == [("{bad",)]
    check_columns(frame, shaped, "lake", "m:f")
    wrong = LakeSink(kind="delta", output_path="/o", quarantine_path="/q", columns=["id", QUARANTINE_REASON])
    with pytest.raises(PipelineError) as error:
        check_columns(frame, wrong, "lake", "m:f")
    assert str(error.value) == (
        f"pipeline 'm:f': sinks.lake.columns names {QUARANTINE_REASON}, which the frame the function returns "
        "for it lacks; its columns: raw, id"
    )
