"""The installed environment is consistent: one pyspark, its jars of the same version, Java checked."""

from __future__ import annotations

import glob
import importlib.metadata
import os
import re
import subprocess
from pathlib import Path

import pyspark

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_pyspark_python_files_match_the_shipped_jars() -> None:
    jars = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "spark-core_*.jar"))
    assert len(jars) == 1, f"expected exactly one spark-core jar, found {jars}"
    jar_version = re.search(r"spark-core_[0-9.]+-(.+)\.jar$", jars[0]).group(1)
    assert pyspark.__version__ == jar_version
    assert importlib.metadata.version("pyspark") == jar_version


def test_pyspark_client_is_not_installed_over_pyspark() -> None:
    # pyspark-client writes the same pyspark/ files as pyspark; the lock leaves it out on purpose.
    try:
        importlib.metadata.version("pyspark-client")
    except importlib.metadata.PackageNotFoundError:
        return
    raise AssertionError("pyspark-client is installed: its pyspark/ files may shadow pyspark's")


def test_spark_version_supports_python_source_admission_control() -> None:
    major, minor = (int(x) for x in pyspark.__version__.split(".")[:2])
    assert (major, minor) >= (4, 2)
    from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow  # noqa: F401


def test_bootstrap_refuses_an_old_java_with_a_clear_message(tmp_path: Path) -> None:
    fake_jdk = tmp_path / "jdk11"
    (fake_jdk / "bin").mkdir(parents=True)
    java = fake_jdk / "bin" / "java"
    java.write_text("#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n")
    java.chmod(0o755)
    env = dict(os.environ, JAVA_HOME=str(fake_jdk))
    result = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "bootstrap.sh")], env=env, capture_output=True, text=True
    )
    assert result.returncode == 3
    assert "Java 17 or newer is required" in result.stderr
    assert "11.0.2" in result.stderr


def test_bootstrap_names_a_missing_java(tmp_path: Path) -> None:
    env = dict(os.environ, JAVA_HOME=str(tmp_path / "nowhere"))
    result = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "bootstrap.sh")], env=env, capture_output=True, text=True
    )
    assert result.returncode == 3
    assert "no 'java' was found" in result.stderr
