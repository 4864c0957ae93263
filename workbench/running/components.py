"""What ``fgl-workbench list`` prints, without importing the components.

Importing every target, attack and defense loads torch, PyG and scikit-learn (8 s on a 2-core
machine), so the built-ins' one listed fact each (level, adversaries, stage) is kept here as
data, and installed plug-ins are listed from their entry-point metadata, not imported.
``tests/workbench/running/test_components.py`` checks this table against the registries, so it
cannot drift from the code; ``list --import`` asks the registries themselves (and checks
plug-ins)."""

from __future__ import annotations

from importlib.metadata import entry_points

KINDS = ("targets", "attacks", "defenses", "datasets", "partitioners")
# kind → (entry-point group, what the listed fact is called)
PLUGIN_GROUPS = {
    "targets": "fgl_workbench.targets",
    "attacks": "fgl_workbench.attacks",
    "defenses": "fgl_workbench.defenses",
}
BUILT_IN: dict[str, dict[str, str]] = {
    "targets": {
        "ce-fedgnn": "node",
        "cefgc": "graph",
        "centralized": "any",
        "fedavg": "any",
        "fedgc": "node",
        "fedtad": "node",
        "flower": "any",
        "gap": "node",
        "opfgl": "node",
    },
    "attacks": {
        "attribute-inference": "querier",
        "class-gradient-inversion": "server",
        "feature-inversion": "insider",
        "generator-sampling": "client",
        "generator-source": "client",
        "gradient-inversion": "server",
        "graph-reconstruction": "served",
        "label-distribution": "server",
        "link-stealing": "served",
        "link-teller": "served",
        "mia-fedmia": "server, client",
        "mia-generator-loss": "client",
        "mia-generator-shadow": "client",
        "mia-lira": "querier, server",
        "mia-quantile": "querier, server, client",
        "mia-rmia": "querier, server",
        "mia-shadow": "querier, server",
        "mia-statistics-tracing": "server, client",
        "mia-threshold": "querier, server",
        "reidentification-audit": "insider",
        "source-inference": "server, querier",
        "statistics-attribute-inference": "server",
        "statistics-inversion": "server",
        "structure-inversion": "server",
        "uploaded-label-distribution": "server",
    },
    "defenses": {
        "aggregation-perturbation": "message_passing",
        "dp-fedavg": "aggregation",
        "dp-sgd": "local_training",
        "gaussian-upload": "upload",
        "information-bottleneck": "data",
        "masked-aggregation": "aggregation",
        "metric-dp": "release",
        "secure-aggregation": "aggregation",
        "statistics-noise": "upload",
    },
    "datasets": {
        "AIDS": "graph",
        "Actor": "node",
        "BZR": "graph",
        "COX2": "graph",
        "CiteSeer": "node",
        "Cora": "node",
        "Cornell": "node",
        "ENZYMES": "graph",
        "IMDB-BINARY": "graph",
        "IMDB-MULTI": "graph",
        "MUTAG": "graph",
        "NCI1": "graph",
        "PROTEINS": "graph",
        "PTC_MR": "graph",
        "PubMed": "node",
        "Texas": "node",
        "Wisconsin": "node",
        "csbm": "node",
        "graph-mixture": "graph",
        "interbank": "node",
        "synthetic-graphs": "graph",
    },
    "partitioners": {
        "cross-dataset": "graph",
        "given": "node",
        "graph-dirichlet": "graph",
        "iid": "graph",
        "label-dirichlet": "node",
        "leiden": "node",
        "louvain": "node",
        "louvain-plus": "node",
        "metis": "node",
        "metis-plus": "node",
    },
}


def listing(kind: str, imported: bool = False) -> list[str]:
    """One line per component of ``kind``, sorted by name. ``imported``: ask the registries
    (imports everything, loads and checks plug-ins) instead of this table."""
    lines = dict(_registered(kind) if imported else _declared(kind))
    return [lines[name] for name in sorted(lines)]


def _line(kind: str, name: str, fact: str, origin: str | None) -> str:
    fact = {"attacks": f"adversary: {fact}", "defenses": f"stage: {fact}"}.get(kind, fact)
    return f"{name} ({fact})" + (f" [{origin}]" if origin else "")


def _declared(kind: str) -> dict[str, str]:
    has_origin = kind in PLUGIN_GROUPS
    found = {
        name: _line(kind, name, fact, "built-in" if has_origin else None)
        for name, fact in BUILT_IN[kind].items()
    }
    for ep in entry_points(group=PLUGIN_GROUPS.get(kind, "")) if has_origin else ():
        dist = f" [{ep.dist.name} {ep.dist.version}]" if ep.dist is not None else ""
        found[ep.name] = (
            f"{ep.name} (plug-in, not imported: `list --import` checks it) "
            f"[entry point {PLUGIN_GROUPS[kind]}: {ep.value}{dist}]"
        )
    return found


def _registered(kind: str) -> dict[str, str]:
    import fgl_workbench.data  # noqa: F401  (registers datasets and partitioners)
    from fgl_workbench.attacks import ATTACKS
    from fgl_workbench.attacks.families import adversaries
    from fgl_workbench.data.catalog import DATASETS
    from fgl_workbench.data.partition import PARTITIONERS
    from fgl_workbench.defenses import DEFENSES
    from fgl_workbench.targets import TARGETS

    if kind == "targets":
        return {n: _line(kind, n, TARGETS.get(n).level, TARGETS.origin(n)) for n in TARGETS}
    if kind == "attacks":
        return {
            n: _line(kind, n, ", ".join(adversaries(ATTACKS.get(n))), ATTACKS.origin(n))
            for n in ATTACKS
        }
    if kind == "defenses":
        return {n: _line(kind, n, DEFENSES.get(n).stage, DEFENSES.origin(n)) for n in DEFENSES}
    registry = DATASETS if kind == "datasets" else PARTITIONERS
    return {n: _line(kind, n, registry.get(n).level, None) for n in registry}
