"""No module of the project's packages imports another that imports it back (directly or in a chain).

The graph is built from the source with ``ast``: every ``import`` and ``from ... import`` counts,
at module level, inside functions and under ``if TYPE_CHECKING:`` alike — a cycle hidden by a
function-level import is still a cycle. An edge from a module to one of its own parent packages is
ignored: ``from . import x`` only finishes the parent's import, it does not depend on it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Package name → the folder that holds it.
PACKAGES = {
    "pyspark_eventhubs": ROOT / "connectors",
    "eventhubs_emulator": ROOT / "emulator",
    "hubflow": ROOT / "control",
    "hubflow_jobs": ROOT / "jobs",
    "hubflow_plugins": ROOT / "plugins",
    "hubflow_cli": ROOT / "cli",
}


def module_files(packages: dict[str, Path]) -> dict[str, Path]:
    """``{dotted module name: file}`` for every ``.py`` file of the packages (``__init__`` = the package)."""
    found: dict[str, Path] = {}
    for package, folder in packages.items():
        for path in sorted((folder / package).rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imported(module: str, is_package: bool, node: ast.AST, known: set[str]) -> set[str]:
    """The project modules one import statement names (the deepest one that exists)."""
    targets: list[str] = []
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            anchor = module.split(".")
            anchor = anchor if is_package else anchor[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
    modules = set()
    for target in targets:
        parts = target.split(".")
        while parts and ".".join(parts) not in known:
            parts.pop()
        if parts:
            modules.add(".".join(parts))
    return modules


def import_graph(packages: dict[str, Path]) -> dict[str, set[str]]:
    """``{module: modules it imports}`` among the packages' own modules, parent packages left out."""
    files = module_files(packages)
    known = set(files)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        parents = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                edges |= _imported(module, is_package, node, known)
        graph[module] = edges - parents - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One import chain per strongly connected group of modules: ``[a, b, ..., a]``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm; the graphs are a few hundred modules
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_chain(graph, group) for group in groups]


def _chain(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A shortest import chain from the group's first module back to itself (breadth-first)."""
    start = min(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & group):
                if nxt == start:
                    chain = [node]
                    while chain[-1] != start:
                        chain.append(came_from[chain[-1]])
                    return [start, *reversed(chain[:-1]), start] if node != start else [start, start]
                if nxt not in came_from:
                    came_from[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no chain inside the group {sorted(group)}")  # pragma: no cover


def test_no_module_imports_another_that_imports_it_back() -> None:
    graph = import_graph(PACKAGES)
    assert len(graph) > 50, sorted(graph)  # the packages were found
    found = cycles(graph)
    assert not found, "import cycles (break each by moving what both sides need):\n" + "\n".join(
        " -> ".join(chain) for chain in found
    )


def test_the_check_finds_a_cycle_hidden_in_a_function(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from .a import A\n")
    (package / "a.py").write_text("from .sub import b\nA = 1\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "b.py").write_text("from .. import a  # parent edge ignored, a is a module\n")
    (package / "c.py").write_text("def f():\n    from pkg.sub.b import x\n")
    (package / "d.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    from . import c\n")

    graph = import_graph({"pkg": tmp_path})

    assert graph["pkg.sub.b"] == {"pkg.a"}
    assert graph["pkg.c"] == {"pkg.sub.b"}
    assert graph["pkg.d"] == {"pkg.c"}
    assert "pkg" not in graph["pkg.a"]
    assert cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.a"]]
