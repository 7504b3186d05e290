"""The layers of ``hubflow_jobs`` (docs/jobs.md): each imports only the layers below it.

From the bottom: the package itself, the inputs a config describes (Event Hubs, Kafka, landing
areas, interval folders), lake tables, the driver's runtime and the shared backfill, the pipeline
layer, and the built-in pipelines on top. Everything below them (configs, status, storage,
checkpoint logs) is the control plane's, ``hubflow`` (tests/control/test_import_rules.py). The graph
is the import-cycle test's (every import, function-level ones included), so an upward import
anywhere fails here with its modules named.
"""

from __future__ import annotations

from tests.foundation.test_import_cycles import PACKAGES, import_graph

#: Bottom first; a module's layer is the first entry naming it or its package.
LAYERS: list[tuple[str, ...]] = [
    ("hubflow_jobs",),
    (
        "hubflow_jobs.eventhubs_config",
        "hubflow_jobs.eventhubs_kafka",
        "hubflow_jobs.eventhubs_kafka_sink",
        "hubflow_jobs.landing_area",
        "hubflow_jobs.interval_folders",
    ),
    ("hubflow_jobs.lake",),
    ("hubflow_jobs.runtime", "hubflow_jobs.backfill_window"),
    ("hubflow_jobs.pipeline",),
    ("hubflow_jobs.builtins",),
]


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of the deepest entry that is ``module`` or one of its packages."""
    best, depth = None, -1
    for index, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and name.count(".") > depth:
                best, depth = index, name.count(".")
    assert best is not None, f"{module} is in no layer of LAYERS: add it where it belongs"
    return best


def test_every_module_of_hubflow_jobs_imports_only_its_own_layer_and_those_below() -> None:
    graph = import_graph({"hubflow_jobs": PACKAGES["hubflow_jobs"]})
    upward = sorted(
        f"{module} (layer {layer_of(module)}) imports {target} (layer {layer_of(target)})"
        for module, targets in graph.items()
        for target in targets
        if layer_of(target) > layer_of(module)
    )
    assert not upward, "imports against the layers:\n" + "\n".join(upward)


def test_the_layers_are_packages_named_as_in_the_docs() -> None:
    root = PACKAGES["hubflow_jobs"] / "hubflow_jobs"
    packages = {path.parent.name for path in root.glob("*/__init__.py")}
    assert packages == {"builtins", "lake", "pipeline", "runtime"}
