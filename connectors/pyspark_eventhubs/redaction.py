"""Spark settings that keep Event Hubs secrets out of plans, the UI, event logs and progress.

What Spark shows of a Python data source's options: the analyzed plan (``df.explain(True)``, the
SQL tab of the UI, the event log) prints them as ``[key=value, ...]`` after masking every option
whose key *or value* matches ``spark.redaction.regex`` or ``spark.sql.redaction.options.regex``.
Measured on Spark 4.3 (tests/connector/test_safety.py):

* the usual connection string (``SharedAccessKeyName=...;SharedAccessKey=...``) is masked by
  Spark's default regex ``(?i)secret|password|token|access[.]?key`` (its value matches
  ``access key``), and so is ``eventhubs.clientSecret`` (its key matches ``secret``);
* a connection string that carries a ``SharedAccessSignature`` and no key name is **not**
  masked by the defaults: it appears in ``explain()`` and the SQL tab.

So: call :func:`protect_secrets` on the session (a runtime SQL setting, per session), or pass
:func:`redaction_conf` to the builder / ``spark-submit --conf`` (static, JVM-wide; also masks the
environment tab and the event log's copy of the Spark properties). Checkpoints and query progress
never hold options: offsets are sequence numbers only, and a Python source's progress
description is its JVM class name.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .options import EventHubsOptions

SPARK_DEFAULT_REDACTION_REGEX = "(?i)secret|password|token|access[.]?key"
SPARK_REDACTION_REGEX = "(?i)secret|password|token|access[.]?key|connectionstring|sharedaccesssignature"
# Spark's default for spark.sql.redaction.options.regex is "(?i)url"; keep it and add ours.
SQL_OPTIONS_REDACTION_REGEX = "(?i)url|connectionstring|sharedaccesssignature|clientsecret"
# Masks secrets inside free text that Spark passes through spark.redaction.string.regex.
SPARK_REDACTION_STRING_REGEX = "(?i)(SharedAccessKey|SharedAccessSignature)=[^;\"']*"


def redaction_conf() -> dict[str, str]:
    """Settings for ``SparkSession.builder.config(map=...)`` / ``spark-submit --conf``."""
    return {
        "spark.redaction.regex": SPARK_REDACTION_REGEX,
        "spark.redaction.string.regex": SPARK_REDACTION_STRING_REGEX,
        "spark.sql.redaction.options.regex": SQL_OPTIONS_REDACTION_REGEX,
    }


def protect_secrets(spark: Any) -> None:
    """Mask every ``eventhubs.connectionString`` form in this session's plans and UI."""
    spark.conf.set("spark.sql.redaction.options.regex", SQL_OPTIONS_REDACTION_REGEX)


_SECRET_PATTERNS = [
    re.compile(r"(SharedAccessKey\s*=\s*)[^;\"'\s]+", re.IGNORECASE),
    re.compile(r"(SharedAccessSignature\s*=\s*)[^;\"']+", re.IGNORECASE),
    re.compile(r"(\bsig=)[^&;\"'\s]+", re.IGNORECASE),
]


def redact(text: str, options: EventHubsOptions | None = None) -> str:
    """``text`` with connection strings, SAS keys, signatures and client secrets replaced."""
    if options is not None:
        for secret in (options.connection_string, options.client_secret):
            if secret:
                text = text.replace(secret, "***")
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(r"\1***", text)
    return text
