"""Pipelines of your own: a Python function over DataFrames, its sources and sinks declared in YAML.

The public API (docs/pipelines.md): a registry entry's ``application: module:function`` names the
function (:mod:`.binding` binds it), its config declares ``sources:``, ``sinks:`` and ``params:``
(:mod:`.declarations`), and hubflow reads, writes, checkpoints and supervises (:mod:`.streams`,
:mod:`.job`). The column names a function uses are here: set :data:`QUARANTINE_REASON` on rows that
belong in the sink's quarantine; a files source gives :data:`SOURCE_FILE` and :data:`RAW_RECORD`.
A function that starts its own queries takes a :class:`PipelineContext` as ``context``.
Importing this package imports no Spark.
"""

from hubflow_jobs.pipeline.binding import PipelineError
from hubflow_jobs.pipeline.columns import QUARANTINE_REASON, RAW_RECORD, SOURCE_FILE
from hubflow_jobs.pipeline.declarations import PipelineConfig
from hubflow_jobs.pipeline.streams import PipelineContext

__all__ = [
    "QUARANTINE_REASON",
    "RAW_RECORD",
    "SOURCE_FILE",
    "PipelineConfig",
    "PipelineContext",
    "PipelineError",
]
