"""The one-line reason a job gives for a failure names the Java cause, not only the Py4J call.

A query that cannot start on the JVM side (hadoop-azure refused a token, a class is missing) reaches
Python as a Py4JJavaError whose first line is only "An error occurred while calling o204.load.";
the run's last log line and status carry the innermost Java cause's class and message. Real JVM
Throwables (the shared session's JVM), wrapped as Py4J wraps a thrown one.
"""

from __future__ import annotations

from typing import Any

from hubflow_jobs.runtime.runner import one_line


def test_a_py4j_error_is_reported_with_its_innermost_java_cause(spark: Any) -> None:
    from py4j.protocol import Py4JJavaError

    jvm = spark._jvm
    refusal = jvm.java.io.IOException("HTTP Error 401; AADToken: token refused by the authority")
    outer = jvm.java.lang.RuntimeException("Failed to initialize filesystem", refusal)
    error = Py4JJavaError("An error occurred while calling o204.load.\n", outer)

    line = one_line(error)

    assert line.startswith("Py4JJavaError: An error occurred while calling o204.load.")
    assert line.endswith(
        "caused by java.io.IOException: HTTP Error 401; AADToken: token refused by the authority"
    ), line
    assert "Failed to initialize" not in line, "the innermost cause, not the wrapper"


def test_other_errors_keep_their_first_line() -> None:
    assert one_line(ValueError("bad value\nmore detail")) == "ValueError: bad value"


def test_a_state_schema_error_says_what_changed_once() -> None:
    """Spark's state schema check (its message as Spark 4.2 writes it): the line naming the stored
    schema and the new one is kept; a cause that repeats the first line is not told again."""
    message = (
        "[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does not match existing state key "
        "schema.\n"
        "Please check number and type of fields.\n"
        "Existing key_schema=StructType(StructField(id,LongType,true)) and new "
        "key_schema=StructType(StructField(id,LongType,true),StructField(name,StringType,true)).\n"
        "If you want to force running the query without schema validation, please set "
        "spark.sql.streaming.stateStore.stateSchemaCheck to false."
    )
    error = RuntimeError(message)
    error._cause = RuntimeError(message)  # type: ignore[attr-defined]  # as pyspark captures it
    assert one_line(error) == (
        "RuntimeError: [STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does not match "
        "existing state key schema. Existing key_schema=StructType(StructField(id,LongType,true)) and "
        "new key_schema=StructType(StructField(id,LongType,true),StructField(name,StringType,true))."
    )
