"""The files ``hubflow new pipeline`` writes, as text: the module, its config, its unit test.

One template per source kind (``files``, ``eventhubs``, ``eventhubs_kafka``, ``delta``, ``parquet``;
the two table kinds share theirs), each a working example of the pipeline API (docs/pipelines.md): a
function ``transform`` with one parameter per source and a ``params`` model ``Params``, a config with
that source and one Delta sink under a local data folder, and a unit test calling the function on a
batch DataFrame. With the trigger ``realtime`` (an
``eventhubs_kafka`` source) the sink is a second hub, through its Kafka endpoint too, and the job is
a streaming one in Spark's real-time mode (docs/pipelines.md, "Real-time pipelines"). The text is
ruff-clean (check and format) as written; tests/cli/test_new.py checks it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

SOURCE_KINDS = ("files", "eventhubs", "eventhubs_kafka", "delta", "parquet")
#: ``hubflow new pipeline --trigger``: a scheduled availableNow job, or a real-time streaming one.
TRIGGERS = ("available-now", "realtime")
#: The only source kind (and sink kind) of a real-time scaffold.
REAL_TIME_KIND = "eventhubs_kafka"
#: A real-time scaffold's checkpoint interval (how long each of its batches runs).
REAL_TIME_INTERVAL = "30 seconds"
#: A path YAML reads as the same string without quotes.
_PLAIN = re.compile(r"^[A-Za-z0-9_./][A-Za-z0-9_./:-]*$")
#: The sink every scaffold declares.
SINK = "output"
#: The source kinds reading a lake table another pipeline writes: one template, the kind's table
#: as the comment of its ``path``.
TABLE_KINDS = {
    "delta": "a Delta table",
    "parquet": "a parquet table Spark's file sink wrote (a `kind: parquet` sink's)",
}
#: The time column a table scaffold's source names for backfills (``interval_column``).
INTERVAL_COLUMN = "event_time"
#: The upstream table's columns in a table scaffold: a ``parquet`` source declares them (`schema`).
UPSTREAM_SCHEMA = f"id BIGINT, {INTERVAL_COLUMN} TIMESTAMP, name STRING"

_MODULE_HEAD = '''"""The pipeline {name} (docs/pipelines.md).

Its source: {what}.

hubflow reads the sources its config declares (in pipelines/configs/, of the same name)
and calls ``transform`` with each as a streaming DataFrame (bound by parameter name) and
with the config's ``params:``; it writes what ``transform`` returns to the config's
sink. The same function runs on batch DataFrames in its unit test (pipelines/tests/).
"""

from pydantic import BaseModel{pydantic_extra}
from pyspark.sql import DataFrame{functions_import}


class Params(BaseModel):
    """The config's ``params:``, validated before anything runs (``hubflow check``)."""

'''

_FILES_MODULE = '''    #: Records with a smaller amount go to the quarantine.
    min_amount: float = 0.0


def transform({source}: DataFrame, params: Params) -> DataFrame:
    """The landing records; a bad one carries why it goes to the sink's quarantine."""
    # A non-null _quarantine_reason sends the row to the sink's quarantine_path. A
    # record that does not parse with the schema has its text in _raw_record.
    reason = F.when(
        F.col("_raw_record").isNotNull(),
        F.concat(F.lit("does not parse: "), F.col("_raw_record")),
    ).when(
        F.col("amount") < params.min_amount,
        F.lit(f"amount below {{params.min_amount}}"),
    )
    return {source}.select(
        "id",
        "name",
        "amount",
        "_source_file",
        reason.alias("_quarantine_reason"),
    )
'''

_EVENTHUBS_MODULE = '''    #: Only events whose body starts with it are kept ("" keeps every event).
    prefix: str = ""


def transform({source}: DataFrame, params: Params) -> DataFrame:
    """Each event's body as text, with its place in the hub."""
    # The connector's columns: body (binary), partition, offset, sequenceNumber,
    # enqueuedTime, publisher, partitionKey, properties, systemProperties.
    bodies = {source}.select(
        F.col("body").cast("string").alias("body"),
        "partition",
        "sequenceNumber",
        "enqueuedTime",
    )
    return bodies.where(F.col("body").startswith(params.prefix))
'''

#: The same function on the hub read through its Kafka endpoint: the same columns, two of them empty.
_EVENTHUBS_KAFKA_MODULE = _EVENTHUBS_MODULE.replace(
    """    # The connector's columns: body (binary), partition, offset, sequenceNumber,
    # enqueuedTime, publisher, partitionKey, properties, systemProperties.
""",
    """    # The eventhubs kind's columns, through Spark's Kafka source: body (binary),
    # partition, sequenceNumber (Kafka's offset), enqueuedTime, partitionKey (the
    # key), properties (the headers); offset and publisher are null.
""",
)

#: A real-time pipeline: events forwarded from hub to hub, filtered, with their key and properties.
_REAL_TIME_MODULE = '''    #: Only events whose body starts with it are forwarded ("" forwards every event).
    prefix: str = ""


def transform({source}: DataFrame, params: Params) -> DataFrame:
    """The events to forward: body, key and properties, as the output hub's sink takes them."""
    # Real-time mode runs stateless steps only (select, filter, UDFs): no aggregation,
    # join or deduplication. The eventhubs kind's columns, through Spark's Kafka source.
    kept = {source}.where(F.col("body").cast("string").startswith(params.prefix))
    return kept.select("body", "partitionKey", "properties")
'''

_TABLE_MODULE = '''    #: The columns to keep (empty: every column of the upstream table). A backfill
    #: finds an interval's rows in the output by the source's interval_column: keep it.
    columns: list[str] = Field(default_factory=list)


def transform({source}: DataFrame, params: Params) -> DataFrame:
    """The rows each commit of the upstream table added, with the chosen columns."""
    return {source}.select(*(params.columns or ["*"]))
'''

_CONFIG = """# The config of the pipeline {name} (docs/pipelines.md), its function in pipelines/.
# Local paths, for `hubflow run {name} --once`; a deployment's config names its own.
name: {name}
trigger:
  availableNow: true  # or processingTime: "30 seconds" for a long-running job
checkpoint_root: {checkpoints}
status_root: {status}
spark_conf:
  spark.sql.shuffle.partitions: 2
sources:
  {source}:  # the parameter `{source}` of transform
{source_keys}
sinks:
  {sink}:  # what transform returns
    kind: delta
    output_path: {output}
{sink_extra}params:
{params}
"""

_REAL_TIME_CONFIG = """# The config of the pipeline {name} (docs/pipelines.md), its function in pipelines/.
# Real-time mode: each event is forwarded as it arrives; the query commits every
# checkpoint interval. Its Spark application needs a core per partition of the source.
name: {name}
trigger:
  realTime: "{interval}"  # the checkpoint interval (docs/pipelines.md, "Real-time pipelines")
checkpoint_root: {checkpoints}
status_root: {status}
sources:
  {source}:  # the parameter `{source}` of transform
{source_keys}
sinks:
  {sink}:  # what transform returns: body, partitionKey, properties
    kind: eventhubs_kafka
    connection_string_env: {sink_variable}  # the output hub's connection string
    eventhub_name: {name}_{sink}
{bootstrap}  # the emulator only: the address it prints
params:
{params}
"""

_TEST_HEAD = '''"""The unit test of the pipeline {name}.

Its function on a small batch DataFrame, no streaming; ``spark`` is the local session of
pipelines/tests/conftest.py.
"""

'''

_FILES_TEST = """from {name} import Params, transform


def test_good_records_pass_and_bad_ones_carry_their_reason(spark) -> None:
    {source} = spark.createDataFrame(
        [
            (1, "a", 10.0, None, "f.json"),
            (2, "b", -5.0, None, "f.json"),
            (None, None, None, "not json", "f.json"),
        ],
        "id LONG, name STRING, amount DOUBLE, _raw_record STRING, _source_file STRING",
    )

    rows = transform({source}, Params(min_amount=0)).collect()

    reasons = {{row["id"]: row["_quarantine_reason"] for row in rows}}
    assert reasons == {{
        1: None,
        2: "amount below 0.0",
        None: "does not parse: not json",
    }}
"""

_EVENTHUBS_TEST = """from datetime import datetime

from {name} import Params, transform


def test_keeps_the_events_whose_body_has_the_prefix(spark) -> None:
    {source} = spark.createDataFrame(
        [
            (bytearray(b"keep 1"), "0", 1, datetime(2026, 1, 1)),
            (bytearray(b"drop 2"), "1", 2, datetime(2026, 1, 1)),
        ],
        "body BINARY, partition STRING, sequenceNumber BIGINT, enqueuedTime TIMESTAMP",
    )

    rows = transform({source}, Params(prefix="keep")).collect()

    assert [(row["body"], row["partition"]) for row in rows] == [("keep 1", "0")]
"""

_REAL_TIME_TEST = """from {name} import Params, transform


def test_forwards_the_events_whose_body_has_the_prefix(spark) -> None:
    {source} = spark.createDataFrame(
        [
            (bytearray(b"keep 1"), "k1", {{"source": "a"}}),
            (bytearray(b"drop 2"), None, {{}}),
        ],
        "body BINARY, partitionKey STRING, properties MAP<STRING, STRING>",
    )

    rows = transform({source}, Params(prefix="keep")).collect()

    assert [(bytes(row["body"]), row["partitionKey"]) for row in rows] == [(b"keep 1", "k1")]
"""

_TABLE_TEST = """from {name} import Params, transform


def test_keeps_the_chosen_columns(spark) -> None:
    {source} = spark.createDataFrame([(1, "a"), (2, "b")], "id BIGINT, name STRING")

    rows = transform({source}, Params(columns=["id"])).collect()

    assert sorted(tuple(row) for row in rows) == [(1,), (2,)]  # only the id column
"""

CONFTEST = '''"""Fixtures of the pipelines' unit tests: the modules importable, a local Spark."""

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The pipeline modules are in the folder above (pipelines/), where hubflow imports them.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# Spark's Python workers must run this interpreter, not the first python3 on PATH.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
def spark() -> Iterator:
    """A small local SparkSession for batch DataFrames (no UI, one partition, UTC)."""
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[1]")
        .appName("pipeline-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    yield session
    session.stop()
'''


@dataclass(frozen=True)
class Kind:
    """What a scaffold of one source kind writes."""

    source: str
    what: str
    module: str
    test: str
    params: str


KINDS = {
    "files": Kind(
        "landing",
        "records of JSON-lines files landing in a folder",
        _FILES_MODULE,
        _FILES_TEST,
        "  min_amount: 0",
    ),
    "eventhubs": Kind(
        "events", "the events of an Event Hub", _EVENTHUBS_MODULE, _EVENTHUBS_TEST, '  prefix: ""'
    ),
    "eventhubs_kafka": Kind(
        "events",
        "the events of an Event Hub, read through its Kafka endpoint",
        _EVENTHUBS_KAFKA_MODULE,
        _EVENTHUBS_TEST,
        '  prefix: ""',
    ),
    **{
        kind: Kind("upstream", f"the rows added to {table}", _TABLE_MODULE, _TABLE_TEST, "  columns: []")
        for kind, table in TABLE_KINDS.items()
    },
}


def _path(value: str) -> str:
    """A path as a YAML scalar: plain when it is plain, else quoted (JSON's quoting is YAML's)."""
    return value if _PLAIN.match(value) else json.dumps(value)


def module_text(name: str, kind: str, real_time: bool = False) -> str:
    """``pipelines/<name>.py``."""
    spec = KINDS[kind]
    head = _MODULE_HEAD.format(
        name=name,
        what=spec.what + (",\nforwarded to another hub in real time" if real_time else ""),
        pydantic_extra=", Field" if kind in TABLE_KINDS else "",
        functions_import="" if kind in TABLE_KINDS else "\nfrom pyspark.sql import functions as F",
    )
    return head + (_REAL_TIME_MODULE if real_time else spec.module).format(source=spec.source)


#: The config line of an eventhubs_kafka scaffold for the emulator, commented out: the emulator's
#: connection string does not say its Kafka port (docs/pipelines.md); the service's does.
EMULATOR_BOOTSTRAP_LINE = "    # kafka_bootstrap_servers: 127.0.0.1:9093"


def connection_variable(name: str) -> str:
    """The environment variable an Event Hubs scaffold's config reads the connection string from."""
    return f"{name.upper()}_EVENTHUBS_CONNECTION"


def landing_folder(data: str, name: str) -> str:
    """The landing folder of a files scaffold (created with it, so its config validates)."""
    return f"{data}/landing/{name}"


def upstream_table(data: str) -> str:
    """The upstream table a ``delta`` or ``parquet`` scaffold's source follows (point it at yours)."""
    return f"{data}/lake/upstream"


def table_source_keys(kind: str, data: str) -> str:
    """The source keys of a ``delta`` or ``parquet`` scaffold: the table, its time column for backfills."""
    schema = f'    schema: "{UPSTREAM_SCHEMA}"  # the columns its files hold\n' if kind == "parquet" else ""
    return (
        f"    kind: {kind}\n    path: {_path(upstream_table(data))}  # {TABLE_KINDS[kind]}, to follow\n"
        f"{schema}"
        f"    interval_column: {INTERVAL_COLUMN}  # its time column (timestamp or date):"
        " a backfill re-reads an interval's rows by it"
    )


def config_text(name: str, kind: str, data: str, real_time: bool = False) -> str:
    """``pipelines/configs/<name>.yaml``: its paths under the folder ``data``."""
    spec = KINDS[kind]
    if kind == "files":
        source_keys = (
            "    kind: files\n"
            f"    path: {_path(landing_folder(data, name))}  # JSON-lines files land here\n"
            "    format: json\n"
            '    schema: "id BIGINT, name STRING, amount DOUBLE"'
        )
        sink_extra = f"    quarantine_path: {_path(f'{data}/quarantine/{name}')}  # rows with a reason\n"
    elif kind == "eventhubs":
        source_keys = (
            "    kind: eventhubs\n"
            f"    connection_string_env: {connection_variable(name)}  # the variable holding the "
            "connection string\n"
            f"    eventhub_name: {name}\n"
            "    starting_position: earliest"
        )
        sink_extra = ""
    elif kind == "eventhubs_kafka":
        source_keys = (
            "    kind: eventhubs_kafka\n"
            f"    connection_string_env: {connection_variable(name)}  # the variable holding the "
            "connection string\n"
            f"    eventhub_name: {name}  # the Kafka topic\n"
            "    starting_position: earliest\n"
            f"{EMULATOR_BOOTSTRAP_LINE}  # the emulator only: the address it prints"
        )
        sink_extra = ""
    else:
        source_keys = table_source_keys(kind, data)
        sink_extra = ""
    common = {
        "name": name,
        "checkpoints": _path(f"{data}/checkpoints"),
        "status": _path(f"{data}/status"),
        "source": spec.source,
        "source_keys": source_keys,
        "sink": SINK,
        "params": spec.params,
    }
    if real_time:
        return _REAL_TIME_CONFIG.format(
            **common,
            interval=REAL_TIME_INTERVAL,
            sink_variable=connection_variable(f"{name}_{SINK}"),
            bootstrap=EMULATOR_BOOTSTRAP_LINE,
        )
    return _CONFIG.format(**common, output=_path(f"{data}/lake/{name}"), sink_extra=sink_extra)


def unit_test_text(name: str, kind: str, real_time: bool = False) -> str:
    """``pipelines/tests/test_<name>.py``."""
    spec = KINDS[kind]
    test = _REAL_TIME_TEST if real_time else spec.test
    return _TEST_HEAD.format(name=name) + test.format(name=name, source=spec.source)


def registry_entry(name: str, config: str, indent: str, real_time: bool = False) -> str:
    """The registry's list item for the pipeline, indented like the file's other items: a scheduled
    job, or a streaming one (supervised) for real-time mode."""
    inner = indent + "  "
    entry = f"{indent}- name: {name}\n{inner}application: {name}:transform\n{inner}config: {_path(config)}\n"
    if real_time:
        return entry + f"{inner}mode: streaming\n"
    return entry + f"{inner}mode: scheduled\n" + f'{inner}schedule: "@hourly"\n'
