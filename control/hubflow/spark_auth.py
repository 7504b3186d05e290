"""Spark's RPC secret (``spark.authenticate``) for a job's driver: its variable and conf names.

Runs on the driver (:mod:`hubflow_jobs.runtime.session`) and names the variable for the Airflow
side (``control/hubflow/invocation.py``), which must not import the session
module at DAG parse time. Spark's daemons and executors read the secret from the environment; a
driver on a standalone master needs it in its SparkConf instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

#: Spark's own variable for its RPC secret.
SPARK_AUTH_SECRET_ENV = "_SPARK_AUTH_SECRET"
SPARK_AUTH_SECRET_CONF = "spark.authenticate.secret"


def auth_conf(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The driver's ``spark.authenticate.secret`` from :data:`SPARK_AUTH_SECRET_ENV`, when set.

    Putting it on the spark-submit command line instead would show it in ``ps``; Spark's UI and logs
    redact it (``spark.redaction.regex``).
    """
    secret = environ.get(SPARK_AUTH_SECRET_ENV)
    return {SPARK_AUTH_SECRET_CONF: secret} if secret else {}
