"""A pipeline run from the command line.

``spark-submit jobs/pipeline.py --pipeline MODULE:FUNCTION --config FILE``; a built-in job that is a
pipeline runs the same way from its own entry script (``jobs/eventhubs_to_lake.py --config FILE``,
:func:`run_builtin`).

The config (:class:`.declarations.PipelineConfig`) is validated and the function found and bound
(:mod:`.binding`) before Spark starts: any problem is one message and exit 2, nothing started.
Then the shared runtime (:func:`hubflow_jobs.runtime.runner.main`) runs it like every hubflow job: lease,
hold, watchdog, status.json, graceful stop; :func:`.streams.start_pipeline` starts its queries.
Runs on the driver.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

from hubflow.config import ConfigError, load_config
from hubflow.invocation import ARG_CONFIG, ARG_PIPELINE
from hubflow.repository import pipelines_folder
from hubflow.status import JobStatus
from hubflow.status.exit_codes import EXIT_CONFIG_ERROR
from hubflow_jobs.pipeline.binding import Binding, PipelineError, bind, load_function
from hubflow_jobs.pipeline.declarations import PipelineConfig
from hubflow_jobs.runtime.runner import configure_logging, main

log = logging.getLogger("hubflow_jobs")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """``--pipeline MODULE:FUNCTION --config FILE``."""
    parser = argparse.ArgumentParser(description="Run a hubflow pipeline (docs/pipelines.md).")
    parser.add_argument(
        ARG_PIPELINE,
        required=True,
        help="the pipeline function, e.g. hot_devices:transform, or a built-in job's name",
    )
    parser.add_argument(ARG_CONFIG, required=True, help="the pipeline's YAML config file")
    return parser.parse_args(list(argv))


def load_pipeline(
    application: str, config_path: str, *, check_environment: bool = True
) -> tuple[PipelineConfig, Binding]:
    """The validated config and the bound function (else ConfigError or PipelineError).

    ``application`` is ``module:function`` or the name of a built-in that is a pipeline; its config
    is read with the built-in's model (which also reads the keys of before pipelines).
    """
    from hubflow.applications import config_model, pipeline_reference

    reference = pipeline_reference(application) or application
    model = config_model(application) or PipelineConfig
    config = cast(PipelineConfig, load_config(config_path, model, check_environment=check_environment))
    binding = bind(load_function(reference), reference, list(config.sources))
    binding.validated_params(config.params)
    return config, binding


def run_pipeline(argv: Sequence[str]) -> int:
    """The ``main`` of ``jobs/pipeline.py``: the exit code (see :mod:`hubflow_jobs`)."""
    configure_logging()
    args = parse_args(argv)
    try:
        config, binding = load_pipeline(args.pipeline, args.config)
    except (ConfigError, PipelineError) as exc:
        log.error("%s", exc)
        return EXIT_CONFIG_ERROR
    log.info(
        "job %s runs pipeline %s (%s): sources %s, sinks %s",
        config.name,
        args.pipeline,
        inspect.getsourcefile(binding.function) or "?",
        ", ".join(config.sources),
        ", ".join(config.sinks),
    )
    start = functools.partial(_start, binding=binding)
    return main([ARG_CONFIG, args.config], type(config), start, description=f"pipeline {binding.reference}")


def run_builtin(application: str, argv: Sequence[str]) -> int:
    """The ``main`` of a built-in's entry script ``jobs/<application>.py --config FILE``."""
    return run_pipeline([ARG_PIPELINE, application, *argv])


def start_function(application: str) -> Callable[[Any, PipelineConfig, JobStatus], Any]:
    """The runner's start function of a pipeline ``application`` (``module:function`` or a built-in's
    name), bound to the config it is given: for running a pipeline in-process, as tests do."""
    from hubflow.applications import pipeline_reference

    reference = pipeline_reference(application) or application
    function = load_function(reference)

    def start(spark: Any, config: PipelineConfig, status: JobStatus) -> Any:
        return _start(spark, config, status, binding=bind(function, reference, list(config.sources)))

    return start


def _start(spark: Any, config: PipelineConfig, status: JobStatus, *, binding: Binding) -> Any:
    from hubflow_jobs.pipeline.streams import start_pipeline

    ship_module(spark, binding)
    return start_pipeline(spark, config, status, binding)


def ship_module(spark: Any, binding: Binding) -> None:
    """Give the executors the pipeline's module when it is a file of the pipelines folder (for its UDFs).

    An installed package is on the executors' path already; a module of ``pipelines/`` is not.
    """
    path = inspect.getsourcefile(binding.function)
    folder = pipelines_folder().resolve()
    if not path or folder not in Path(path).resolve().parents:
        return
    try:
        spark.sparkContext.addPyFile(path)
    except Exception as exc:  # added by an earlier start attempt of this run
        log.debug("pipeline module %s not added again: %s", path, exc)
