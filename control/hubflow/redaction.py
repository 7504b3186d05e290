"""Secrets masked in free text that hubflow shows: error messages, driver logs, status and lease files.

One grammar for every place that shows such text (the status page, ``hubflow status``): a value is
masked when its key names a secret, whichever way the text writes the pair - a connection string
(``SharedAccessKey=...;``, ``AccountKey=...``), a URL query (``sig=...&``), a command line or
config line (``client_secret=...``, ``password: ...``, ``--conf fs.azure.account.key.acct.dfs...=...``),
JSON (``"password": "..."``) or a JAAS config (``clientSecret="..."``). The key stays, so a reader
sees what was there. Imports nothing heavy: the status page runs in Airflow's API server.

The Event Hubs connector ships alone and masks its own messages (``pyspark_eventhubs.redaction``);
this grammar covers all of its cases too (tests/foundation/test_redaction.py).
"""

from __future__ import annotations

import re
from typing import Any

#: Key words of secret values (case-insensitive; ``_``, ``-`` and ``.`` inside a key are allowed).
SECRET_KEYS = (
    r"SharedAccessKey",
    r"SharedAccessSignature",
    r"AccountKey",
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
_SAS = re.compile(r"(?i)(SharedAccessSignature\s*=\s*)([^;\"']+)")
MASK = "***"


def redact(text: Any) -> Any:
    """``text`` with every secret value masked (``SharedAccessKey=***``); other values unchanged."""
    if not isinstance(text, str):
        return text
    text = _SAS.sub(lambda m: m.group(1) + MASK, text)
    text = _QUOTED.sub(lambda m: m.group(1) + MASK + m.group(3), text)
    text = _JAAS.sub(lambda m: m.group(1) + MASK + m.group(3), text)
    return _PAIR.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
