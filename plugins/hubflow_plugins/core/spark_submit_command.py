"""Which spark-submit runs a job and what its driver's environment holds; Airflow-free.

The one owner of both for the Spark hook (``hooks/spark_submit.py``) and the ``hubflow run`` command.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def spark_submit_binary() -> str | None:
    """The spark-submit beside this interpreter (a pip-installed pyspark), else the one on PATH."""
    beside = Path(sys.executable).parent / "spark-submit"
    if beside.exists():
        return str(beside)
    return shutil.which("spark-submit")


def job_environment(secrets: dict[str, str] | None = None) -> dict[str, str]:
    """What the job's driver needs besides its parent's environment: this interpreter for Spark's
    Python workers, the loopback address when one is set, and the job's secrets."""
    env = {
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "PYSPARK_DRIVER_PYTHON": os.environ.get("PYSPARK_DRIVER_PYTHON", sys.executable),
    }
    if os.environ.get("SPARK_LOCAL_IP"):
        env["SPARK_LOCAL_IP"] = os.environ["SPARK_LOCAL_IP"]
    env.update(secrets or {})
    return env
