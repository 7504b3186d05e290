"""A class-data sharing (CDS) archive of the classes a Spark driver loads, for the tests' drivers.

A test driver (spark-submit, PySpark's gateway) spends most of its start-up CPU loading and verifying
the same ten thousand classes from Spark's and Delta's jars. A dynamic CDS archive (JDK 13+,
``-XX:ArchiveClassesAtExit``) holds them already parsed and verified: measured here, a bare local
session starts on about 40% less CPU (18.5 → 10.9 CPU-s), and the suite starts a few hundred drivers
on two shared cores. ``make test-tools`` builds it (:func:`build`, about a minute) by running
``class_archive_job.py`` once; tests add :func:`driver_options` to ``SPARK_SUBMIT_OPTS``.

The JVM checks the archive against its own build and the jars' paths, sizes and modification times:
an archive that no longer matches is ignored (the driver loads classes from the jars as usual,
silently with ``-Xlog:cds=off``), so a stale archive costs time, never correctness. Test tuning
only: the jobs' own JVM options are untouched.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
ARCHIVE = REPO_ROOT / ".venv" / "hubflow-test-classes.jsa"
STAMP = ARCHIVE.with_suffix(".stamp")
TRAINING_JOB = Path(__file__).with_name("class_archive_job.py")


def _jars_dir() -> Path:
    return (
        Path(sys.prefix)
        / "lib"
        / f"python{sys.version_info[0]}.{sys.version_info[1]}"
        / ("site-packages/pyspark/jars")
    )


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = Path(home) / "bin" / "java" if home else shutil.which("java")
    return os.path.realpath(java) if java else ""


def wanted_stamp() -> str:
    """What the archive was built from: the JVM, the jars (names, sizes, times), the training job."""
    digest = hashlib.sha256()
    digest.update(_java().encode())
    jars = _jars_dir()
    for jar in sorted(jars.glob("*.jar")) if jars.is_dir() else []:
        stat = jar.stat()
        digest.update(f"{jar.name} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    digest.update(TRAINING_JOB.read_bytes())
    return digest.hexdigest()


def current() -> bool:
    """The archive exists and was built from this JVM, these jars and this training job."""
    try:
        return ARCHIVE.is_file() and STAMP.read_text().strip() == wanted_stamp()
    except OSError:
        return False


def driver_options() -> str:
    """JVM options that make a driver map the archive ("" when there is no current one)."""
    return f"-XX:SharedArchiveFile={ARCHIVE} -Xlog:cds=off -Xlog:cds+dynamic=off" if current() else ""


def build() -> int:
    """Build the archive unless a current one exists; 0 on success (a failure only costs speed)."""
    if current():
        return 0
    print(
        f"hubflow: building the test drivers' class archive {ARCHIVE.relative_to(REPO_ROOT)}", file=sys.stderr
    )
    spark_submit = Path(sys.executable).parent / "spark-submit"
    with tempfile.TemporaryDirectory(prefix="hubflow-class-archive-") as work:
        partial = Path(work) / "classes.jsa"
        env = {
            **os.environ,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={partial} -Xlog:cds=off -Xlog:cds+dynamic=off",
        }
        result = subprocess.run(
            [str(spark_submit), "--master", "local[2]", str(TRAINING_JOB), work],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if result.returncode != 0 or not partial.is_file():
            print(
                "hubflow: the class archive was not built (tests run without it, only slower):\n"
                + (result.stdout + result.stderr)[-3000:],
                file=sys.stderr,
            )
            return 1
        ARCHIVE.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(partial), ARCHIVE)
    STAMP.write_text(wanted_stamp() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(build())
