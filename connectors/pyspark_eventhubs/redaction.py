"""Spark settings that keep Event Hubs secrets out of plans, the UI, event logs and progress.

What Spark shows of a Python data source's options: the analyzed plan (``df.explain(True)``,
the SQL tab, the event log) prints them as ``[key=value, ...]`` after passing them through
``spark.redaction.regex``, which masks an option when its key *or value* matches. Spark's
default regex ``(?i)secret|password|token|access[.]?key`` already masks a connection string with
``SharedAccessKey=`` in its value and ``eventhubs.clientSecret`` by its key, but not a connection
string that carries a ``SharedAccessSignature``. :data:`SPARK_REDACTION_REGEX` adds the option
name and the signature so every form is masked; set it with :func:`redaction_conf` when building
the session (``spark.redaction.regex`` is a static, JVM-wide setting).
"""

from __future__ import annotations

SPARK_DEFAULT_REDACTION_REGEX = "(?i)secret|password|token|access[.]?key"
SPARK_REDACTION_REGEX = "(?i)secret|password|token|access[.]?key|connectionstring|sharedaccesssignature"
# Masks secrets inside free text Spark redacts with spark.redaction.string.regex (SQL text,
# some log lines): the key or signature part of a connection string.
SPARK_REDACTION_STRING_REGEX = "(?i)(SharedAccessKey|SharedAccessSignature)=[^;\"']*"


def redaction_conf() -> dict[str, str]:
    """Settings for ``SparkSession.builder.config(map=...)`` / ``spark-submit --conf``."""
    return {
        "spark.redaction.regex": SPARK_REDACTION_REGEX,
        "spark.redaction.string.regex": SPARK_REDACTION_STRING_REGEX,
    }
