"""Secrets masked in free text that hubflow shows: error messages, driver logs, status and lease
files, alerts, the audit trail and everything the ``hubflow`` command prints.

One grammar for every place that shows such text: the Event Hubs connector's
(:func:`pyspark_eventhubs.redaction.mask_secrets`), which ships alone and masks its own messages with
it; this module is the control plane's name for it, so there is one rule set and no copy to drift. A
value is masked when its key names a secret, whichever way the text writes the pair - a connection
string (``SharedAccessKey=...;``, ``AccountKey=...``), a URL query (``sig=...&``), a command line or
config line (``account_key=...``, ``password: ...``, ``--conf fs.azure.account.key.acct.dfs...=...``),
JSON (``"shared_access_key": "..."``) or a JAAS config (``clientSecret="..."``) - and so are an
``Authorization`` header's credentials, a bare bearer token and a URL's password
(``scheme://user:***@host``). The key stays, so a reader sees what was there. Imports nothing heavy:
the status page runs in Airflow's API server (the connector's vocabulary imports no pyspark).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from pyspark_eventhubs.redaction import MASK, MIN_SECRET_LENGTH, SECRET_KEYS, mask_secrets

__all__ = ["MASK", "MIN_SECRET_LENGTH", "SECRET_KEYS", "redact", "secret_values"]

#: Environment variable names whose value is a secret: ``*_PASSWORD``, ``*SECRET``, ``*_TOKEN``,
#: ``*_CONNECTION_STRING``, ``*_ACCOUNT_KEY``, ``*_KEY``... (``AZURE_FEDERATED_TOKEN_FILE``, a path, is not).
_SECRET_VARIABLE = re.compile(
    r"(?i)(?:secret|password|passwd|token|connection_?string|account_?key|access_?key|api_?key"
    r"|(?:^|_)key|credentials?)$"
)


def redact(text: Any, secrets: Iterable[str | None] = ()) -> Any:
    """``text`` with every secret masked (``SharedAccessKey=***``), and every value of ``secrets``
    (known secrets, e.g. from :func:`secret_values`) wherever it stands; anything not a string is
    returned as it is."""
    if not isinstance(text, str):
        return text
    return mask_secrets(text, secrets)


def secret_values(environ: Mapping[str, str], names: Iterable[str] = ()) -> list[str]:
    """The values of ``environ`` that are secrets: those of the variables ``names`` (a job config's
    ``*_env`` keys name them: :func:`hubflow.invocation.config_variables`) and of every variable whose
    name says secret (``PGPASSWORD``, ``AZURE_CLIENT_SECRET``, ``HUBFLOW_EVENTHUBS_CONNECTION_STRING``)."""
    wanted = set(names)
    return [
        value
        for name, value in environ.items()
        if value and (name in wanted or _SECRET_VARIABLE.search(name))
    ]
