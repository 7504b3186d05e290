"""The core (``hubflow_plugins.core``) works without Airflow: the boundary its docstring states, enforced.

Two checks. At run time, every core module imports in a fresh interpreter in which ``airflow`` cannot
be imported at all. In the source, no core module - nor any project module a core module imports,
at module level or inside a function - names ``airflow`` in an import, so a function-level import
that the run-time check would not execute is caught too.

The ``hubflow`` command (``hubflow_cli``, in cli/) is held to the same two checks: it is the top
layer, above the jobs runtime and the core, and runs where Airflow is not installed.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from tests.foundation.test_import_cycles import PACKAGES, ROOT, import_graph, module_files

CORE = "hubflow_plugins.core"
CLI = "hubflow_cli"
#: The project's packages and the command's, which imports them.
WITH_CLI = {**PACKAGES, CLI: ROOT / "cli"}

#: Run in a child interpreter: block ``airflow``, import every module of the package in argv[1],
#: print each that failed with its error, exit 1 when any did.
_IMPORT_ALL_WITHOUT_AIRFLOW = """
import importlib, pkgutil, sys

class NoAirflow:
    def find_spec(self, name, path=None, target=None):
        if name == "airflow" or name.startswith("airflow."):
            raise ModuleNotFoundError(f"No module named {name!r} (Airflow is unavailable in this check)")
        return None

sys.meta_path.insert(0, NoAirflow())
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


def _import_without_airflow(package: str) -> subprocess.CompletedProcess:
    folders = ("plugins", "jobs", "connectors", "emulator", "cli", "")
    path = os.pathsep.join(str(ROOT / folder) for folder in folders)
    return subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL_WITHOUT_AIRFLOW, package],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
    )


def _names_airflow(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        if any(name == "airflow" or name.startswith("airflow.") for name in names):
            return True
    return False


def test_every_core_module_imports_with_airflow_unavailable() -> None:
    result = _import_without_airflow(CORE)
    assert result.returncode == 0, f"core modules that need Airflow:\n{result.stdout}{result.stderr}"


def _reached_modules_naming_airflow(package: str) -> list[str]:
    """The modules of ``package`` and every project module they import (in a chain) that import Airflow."""
    graph = import_graph(WITH_CLI)
    files = module_files(WITH_CLI)
    roots = {module for module in graph if module == package or module.startswith(package + ".")}
    reached, frontier = set(roots), list(roots)
    while frontier:
        for imported in graph[frontier.pop()]:
            if imported not in reached:
                reached.add(imported)
                frontier.append(imported)
    return sorted(module for module in reached if _names_airflow(files[module]))


def test_no_core_module_nor_what_it_imports_names_airflow() -> None:
    core = set(module_files(PACKAGES))
    assert {f"{CORE}.checkpoint_inspector", f"{CORE}.rewind", f"{CORE}.job_control"} <= core
    offenders = _reached_modules_naming_airflow(CORE)
    assert not offenders, f"these modules, reached from {CORE}, import Airflow: {offenders}"


def test_the_cli_imports_with_airflow_unavailable() -> None:
    result = _import_without_airflow(CLI)
    assert result.returncode == 0, f"hubflow_cli modules that need Airflow:\n{result.stdout}{result.stderr}"


def test_no_cli_module_nor_what_it_imports_names_airflow() -> None:
    assert {f"{CLI}.main", f"{CLI}.check", f"{CLI}.run", f"{CLI}.status"} <= set(module_files(WITH_CLI))
    offenders = _reached_modules_naming_airflow(CLI)
    assert not offenders, f"these modules, reached from {CLI}, import Airflow: {offenders}"


def test_the_checks_catch_a_module_that_needs_airflow() -> None:
    result = _import_without_airflow("hubflow_plugins.hooks")
    assert result.returncode == 1
    assert "hubflow_plugins.hooks.eventhubs: No module named 'airflow" in result.stdout
    assert _names_airflow(module_files(PACKAGES)["hubflow_plugins.operators.streaming_job"])
