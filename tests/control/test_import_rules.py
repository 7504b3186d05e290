"""The layers import one way: the control plane (``hubflow``) imports neither Airflow nor Spark, and
nothing imports a layer above its own.

The layers, bottom up: the connector (``pyspark_eventhubs``), the control plane (``hubflow``), the Spark
driver side (``hubflow_jobs``), the Airflow side (``hubflow_plugins``), the ``hubflow`` command
(``hubflow_cli``). Two kinds of check. At run time, every control-plane module imports in a fresh
interpreter in which ``airflow`` and ``pyspark`` cannot be imported at all (and every command module,
with ``airflow`` blocked). In the source, no control-plane module - nor any project module it imports,
at module level or inside a function - names ``airflow`` or ``pyspark`` in an import, so a
function-level import that the run-time check would not execute is caught too; and no module of a
layer names a module of a layer above it. The static walk stops at the connector: the control plane
may use its pyspark-free vocabulary (connection strings, positions), whose modules name pyspark in
the functions that need Spark; that importing them loads no pyspark is what the run-time check
proves.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from tests.foundation.test_import_cycles import PACKAGES, ROOT, import_graph, module_files

CONTROL = "hubflow"
CLI = "hubflow_cli"
#: The project's packages and the command's, which imports them.
WITH_CLI = {**PACKAGES, CLI: ROOT / "cli"}
#: Each layer and the layers it may import (its own and those below it).
LAYERS = {
    "pyspark_eventhubs": {"pyspark_eventhubs"},
    CONTROL: {CONTROL, "pyspark_eventhubs"},
    "hubflow_jobs": {"hubflow_jobs", CONTROL, "pyspark_eventhubs"},
    "hubflow_plugins": {"hubflow_plugins", "hubflow_jobs", CONTROL, "pyspark_eventhubs"},
    CLI: {CLI, "hubflow_plugins", "hubflow_jobs", CONTROL, "pyspark_eventhubs"},
}
#: What the control plane may not import, however indirectly.
FORBIDDEN = ("airflow", "pyspark")
#: Where the static walk stops (the run-time check covers what importing it loads).
CONNECTOR = "pyspark_eventhubs"

#: Run in a child interpreter: block the top-level packages in argv[2:], import every module of the
#: package in argv[1], print each that failed with its error, exit 1 when any did.
_IMPORT_ALL_WITHOUT = """
import importlib, pkgutil, sys

blocked = tuple(sys.argv[2:])

class Unavailable:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (unavailable in this check)")
        return None

sys.meta_path.insert(0, Unavailable())
package = importlib.import_module(sys.argv[1])
failed = []
for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
    try:
        importlib.import_module(info.name)
    except ImportError as exc:
        failed.append(f"{info.name}: {exc}")
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def _import_without(package: str, *blocked: str) -> subprocess.CompletedProcess:
    folders = ("control", "plugins", "jobs", "connectors", "emulator", "cli", "")
    path = os.pathsep.join(str(ROOT / folder) for folder in folders)
    return subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL_WITHOUT, package, *blocked],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
    )


def _names(path: Path, packages: tuple[str, ...]) -> bool:
    """Whether the file names one of ``packages`` (or a module in it) in an import."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        if any(name.split(".")[0] in packages for name in names):
            return True
    return False


def _reached_modules_naming(package: str, forbidden: tuple[str, ...], stop_at: str = "") -> list[str]:
    """The modules of ``package`` and every project module they import (in a chain) that import
    one of ``forbidden``; modules of the package ``stop_at`` are neither judged nor followed."""
    graph = import_graph(WITH_CLI)
    files = module_files(WITH_CLI)
    roots = {module for module in graph if module == package or module.startswith(package + ".")}
    reached, frontier = set(roots), list(roots)
    while frontier:
        for imported in graph[frontier.pop()]:
            if stop_at and imported.split(".")[0] == stop_at:
                continue
            if imported not in reached:
                reached.add(imported)
                frontier.append(imported)
    return sorted(module for module in reached if _names(files[module], forbidden))


def _upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``importer -> imported`` for every import of a module in a layer above the importer's."""
    found = []
    for module, imported in sorted(graph.items()):
        allowed = LAYERS.get(module.split(".")[0])
        if allowed is None:
            continue
        found += [
            f"{module} -> {target}" for target in sorted(imported) if target.split(".")[0] not in allowed
        ]
    return found


def test_every_control_plane_module_imports_with_airflow_and_spark_unavailable() -> None:
    result = _import_without(CONTROL, *FORBIDDEN)
    assert result.returncode == 0, (
        f"control-plane modules that need Airflow or Spark:\n{result.stdout}{result.stderr}"
    )


def test_no_control_plane_module_nor_what_it_imports_names_airflow_or_spark() -> None:
    control = set(module_files(PACKAGES))
    assert {f"{CONTROL}.registry", f"{CONTROL}.operations.rewind", f"{CONTROL}.status.lease"} <= control
    offenders = _reached_modules_naming(CONTROL, FORBIDDEN, stop_at=CONNECTOR)
    assert not offenders, f"these modules, reached from {CONTROL}, import Airflow or Spark: {offenders}"


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = _upward_imports(import_graph(WITH_CLI))
    assert not upward, "imports of a layer above the importer's:\n" + "\n".join(upward)


def test_the_cli_imports_with_airflow_unavailable() -> None:
    result = _import_without(CLI, "airflow")
    assert result.returncode == 0, f"hubflow_cli modules that need Airflow:\n{result.stdout}{result.stderr}"


def test_no_cli_module_nor_what_it_imports_names_airflow() -> None:
    assert {f"{CLI}.main", f"{CLI}.check", f"{CLI}.run", f"{CLI}.status"} <= set(module_files(WITH_CLI))
    offenders = _reached_modules_naming(CLI, ("airflow",))
    assert not offenders, f"these modules, reached from {CLI}, import Airflow: {offenders}"


def test_the_checks_catch_a_module_that_breaks_the_rules(tmp_path: Path) -> None:
    result = _import_without("hubflow_plugins.hooks", "airflow")
    assert result.returncode == 1
    assert "hubflow_plugins.hooks.eventhubs: No module named 'airflow" in result.stdout
    assert _names(module_files(PACKAGES)["hubflow_plugins.operators.streaming_job"], FORBIDDEN)
    # a control-plane module that imports pyspark, inside a function, is named
    spark_using = tmp_path / "uses_spark.py"
    spark_using.write_text("def read(path):\n    from pyspark.sql import SparkSession\n")
    assert _names(spark_using, FORBIDDEN)
    assert _upward_imports(
        {"hubflow.registry": {"hubflow_jobs.lake.tables"}, "hubflow_jobs.lake.tables": {"hubflow.durations"}}
    ) == ["hubflow.registry -> hubflow_jobs.lake.tables"]
