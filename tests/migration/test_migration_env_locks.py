"""The Spark 3.5 virtualenv's locks agree with each other and hold the Scala connector, and (where
``make migration-env`` made it) the venv holds exactly the locked jars. Default run: reads files only."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SPARK35 = REPO_ROOT / ".venv-spark35"
JVM_LOCK = REPO_ROOT / "jvm-deps-spark35.lock"


def _jvm_deps() -> ModuleType:
    """scripts/jvm_deps.py (no package): loaded from its file, as tests/foundation/test_jvm_deps.py does."""
    if "jvm_deps" in sys.modules:
        return sys.modules["jvm_deps"]
    spec = importlib.util.spec_from_file_location("jvm_deps", REPO_ROOT / "scripts" / "jvm_deps.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["jvm_deps"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


jvm_deps = _jvm_deps()


def test_the_jvm_lock_is_compiled_for_the_locked_pyspark_and_holds_the_connector() -> None:
    pinned = re.search(r"^pyspark==(\S+) \\", (REPO_ROOT / "requirements-spark35.lock").read_text(), re.M)
    lock = jvm_deps.read_lock(JVM_LOCK)
    assert pinned and lock.pyspark_version == pinned.group(1)
    assert lock.pyspark_version.startswith("3.5.")
    jars = {jar.artifact: jar.version for jar in lock.jars}
    assert jars["azure-eventhubs-spark_2.12"] == "2.3.22"
    assert jars["azure-eventhubs"].startswith("3.3.") and "proton-j" in jars
    # Spark's own jars win: nothing Spark 3.5 ships (Scala, Jackson core, Guava, slf4j) is locked again.
    assert not {"scala-library", "jackson-databind", "guava", "slf4j-api"} & set(jars)


def test_the_main_lock_never_holds_the_scala_connector() -> None:
    assert not [jar for jar in jvm_deps.read_lock().jars if "eventhubs" in jar.artifact]


@pytest.mark.skipif(
    not (SPARK35 / "bin" / "python").exists(), reason="no .venv-spark35: run `make migration-env`"
)
def test_the_spark35_venv_holds_exactly_the_locked_jars() -> None:
    result = subprocess.run(
        [
            str(SPARK35 / "bin" / "python"),
            str(REPO_ROOT / "scripts" / "jvm_deps.py"),
            "check",
            "--lock",
            str(JVM_LOCK),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
