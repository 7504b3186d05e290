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

Free text - the connector's own error messages, and everything hubflow shows (the status page, the
driver log, alerts, the ``hubflow`` command, through ``hubflow.redaction``) - is masked by one
grammar, :func:`mask_secrets`. It lives here because the connector ships alone and needs it for its
own messages; the control plane imports it (this module imports no pyspark).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
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


#: Key words of secret values (case-insensitive; ``_``, ``-`` and ``.`` inside a key are allowed):
#: Event Hubs and Storage connection strings, Azure's SDK and Airflow's ``wasb``/``adls`` connection
#: extras (``account_key``, ``shared_access_key``, ``sas_token``, ``connection_string``), Spark's
#: ``fs.azure.*`` keys, and the usual password, secret and token words.
SECRET_KEYS = (
    r"shared[_-]?access[_-]?key",
    r"shared[_-]?access[_-]?signature",
    r"account[_-]?key",
    r"access[_-]?key",
    r"api[_-]?key",
    r"connection[_-]?string",
    r"client[_-]?secret",
    r"password",
    r"passwd",
    r"secret",
    r"token",
    r"sig",
    r"fs\.azure\.account\.key(?:\.[\w.-]+)?",
    r"fs\.azure\.sas(?:\.[\w.-]+)?",
)
_KEY = r"(?:[\w.-]*?[_.-])?(?:" + "|".join(SECRET_KEYS) + r")"
#: ``"key": "value"`` (JSON, Python reprs).
_QUOTED = re.compile(r"""(?i)(["'](?:""" + _KEY + r""")["']\s*:\s*["'])([^"']*)(["'])""")
#: ``key=value`` and ``key: value`` (connection strings, URLs, command lines, YAML, log lines).
_PAIR = re.compile(r"""(?i)(?<![\w.-])(""" + _KEY + r""")(\s*[=:]\s*)(?!\*\*\*)([^;&\s"',}]+)""")
#: ``key="value"`` (a JAAS config's options: ``clientSecret="..."``, ``password="..."``; ``\"`` inside).
_JAAS = re.compile(r"""(?i)(?<![\w.-])(""" + _KEY + r"""\s*=\s*")((?:[^"\\]|\\.)*)(")""")
#: A SharedAccessSignature value runs to the next ``;`` (it holds spaces and ``&``).
_SAS = re.compile(r"(?i)(shared[_-]?access[_-]?signature\s*=\s*)([^;\"']+)")
#: An HTTP ``Authorization`` (or ``Proxy-Authorization``) header, as a line or a JSON/dict entry: the
#: scheme (``Bearer``, ``Basic``, ``SharedAccessSignature``...) stays, the credentials go (up to a
#: space, quote, ``,``, ``;`` or closing bracket, none of which a token or base64 holds).
_AUTHORIZATION = re.compile(
    r"""(?i)(?<![\w.-])((?:proxy-)?authorization["']?\s*[:=]\s*["']?)(?:([a-z][\w-]*)\s+)?([^\s"',;)\]}>]+)"""
)
#: A bearer token without its header (``'Bearer eyJ...'`` in an SDK's message); short words after
#: "bearer" are prose ("bearer token expired"), not tokens.
_BEARER = re.compile(r"(?i)(?<![\w-])(bearer\s+)([a-z0-9\-._~+/]{16,}=*)")
#: The password of a URL's userinfo (``scheme://user:password@host``); the user and the host stay.
_URL_PASSWORD = re.compile(r"""(?i)\b([a-z][a-z0-9+.-]*://[^\s/?#:@"'<>]*:)([^\s/?#"'<>]+)(@)""")
MASK = "***"
#: Known secret values shorter than this are not masked where they stand bare: they would mask words.
MIN_SECRET_LENGTH = 8


def mask_secrets(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with every secret masked, its key kept (``SharedAccessKey=***``).

    ``secrets`` are values known to be secret (a connection string, an environment variable's
    value): masked wherever they stand, longest first, when at least :data:`MIN_SECRET_LENGTH` long.
    Then the grammar: a value is masked when its key names a secret (:data:`SECRET_KEYS`), whichever
    way the text writes the pair - a connection string (``SharedAccessKey=...;``), a URL query
    (``sig=...&``), a command line or config line (``account_key=...``, ``password: ...``,
    ``--conf fs.azure.account.key.acct.dfs...=...``), JSON or a repr (``"shared_access_key": "..."``)
    or a JAAS config (``clientSecret="..."``); an ``Authorization`` header's credentials and a bare
    bearer token; a URL's password (``scheme://user:***@host``). Masking twice changes nothing.
    """
    for secret in sorted({s for s in secrets if s and len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    text = _SAS.sub(lambda m: m.group(1) + MASK, text)
    text = _QUOTED.sub(lambda m: m.group(1) + MASK + m.group(3), text)
    text = _JAAS.sub(lambda m: m.group(1) + MASK + m.group(3), text)
    text = _AUTHORIZATION.sub(lambda m: m.group(1) + (f"{m.group(2)} " if m.group(2) else "") + MASK, text)
    text = _BEARER.sub(lambda m: m.group(1) + MASK, text)
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + MASK + m.group(3), text)
    return _PAIR.sub(lambda m: m.group(1) + m.group(2) + MASK, text)


def redact(text: str, options: EventHubsOptions | None = None, *, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with connection strings, keys, signatures, tokens and passwords masked
    (:func:`mask_secrets`); with ``options``, their connection string and client secret too."""
    if options is not None:
        secrets = [*secrets, options.connection_string, options.client_secret]
    return mask_secrets(text, secrets)
