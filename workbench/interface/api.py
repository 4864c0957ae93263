"""The Python API; the command line is a thin layer over it.

    from fgl_workbench.interface.api import (
        Gaussian, PrivacyLedger, build_report, components, epsilon, run_suite,
    )

    summary = run_suite("examples/quickstart.yaml", "runs/quickstart")  # train, attack, store
    privacy("runs/quickstart")              # per cell id: ε per adversary, canary audit bounds
    results("runs/quickstart")              # pandas: a row per cell × attack, metrics as columns
    history("runs/quickstart")              # pandas: a row per cell × training round
    log_mlflow("runs/quickstart", "file:///tmp/mlruns")               # a run per cell in MLflow
    attack("runs/quickstart", [{"name": "mia-lira"}])                 # later, no retraining
    html = build_report("runs/quickstart")                             # report.html and .pdf
    eps = epsilon(PrivacyLedger().record(Gaussian(sigma=2.0)), delta=1e-5).epsilon
    components("targets")                                              # name → its origin

The objects of the architecture note are importable from here too: the suite (``Suite``,
``load_suite``, ``parse_suite``), the federation (``load_dataset``, ``make_partition``,
``build_federation``), targets (``TARGETS``, ``TrainedTarget``), views and knowledge
(``server_view``, ``client_view``, ``querier_view``, ``background_knowledge``), attacks
(``ATTACKS``, ``AttackInput``, ``AttackOutput``), defenses (``DEFENSES``, ``applied``), the
ledger and accountants, and the results store (``ResultsStore``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError

from fgl_workbench.accountants import (
    Gaussian,
    Laplace,
    MetricGaussian,
    PrivacyLedger,
    SubsampledGaussian,
    epsilon,
)
from fgl_workbench.adversary.threat import (
    background_knowledge,
    client_view,
    querier_view,
    server_view,
)
from fgl_workbench.attacks import ATTACKS, AttackInput, AttackOutput
from fgl_workbench.attacks.plugins import trusting
from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.defenses import DEFENSES, applied
from fgl_workbench.errors import ConfigError
from fgl_workbench.external import (
    ModelAudit,
    ScoreAudit,
    audit_model,
    audit_scores,
    audit_uploads,
)
from fgl_workbench.running import runner
from fgl_workbench.running.runner import Executor, RunSummary, attack_stored
from fgl_workbench.running.suite import (
    AttackEntry,
    AuditEntry,
    Suite,
    format_errors,
    load_suite,
    parse_suite,
)
from fgl_workbench.storage.store import ResultsStore
from fgl_workbench.targets import TARGETS, TrainedTarget

if TYPE_CHECKING:
    import pandas

    from fgl_workbench.reports.mlflow_log import Logged

Kind = Literal["targets", "attacks", "defenses"]


def run_suite(
    suite: str | Path | dict[str, Any] | Suite,
    out: str | Path,
    data_root: str | None = None,
    *,
    quiet: bool = True,
    jobs: int = 1,
    executor: Executor = "serial",
    address: str = "local",
    keep_client_secrets: bool = False,
    device: str | None = None,
    trust_plugins: bool = False,
    threads: int | None = None,
) -> RunSummary:
    """Runs a suite (a YAML path, its parsed mapping, or a ``Suite``) into ``out``: every
    cell not stored there yet is trained and attacked; finished cells are skipped, so an
    interrupted run resumes. ``executor``/``jobs``/``address`` as ``fgl-workbench run``;
    ``keep_client_secrets``, ``trust_plugins`` and ``device`` (None: the suite's) as the
    suite's fields; ``threads``: each cell's intra-op threads (None: ``OMP_NUM_THREADS`` if
    set, else the cores the machine's load leaves free; ``summary.threads`` says which)."""
    with trusting(trust_plugins):
        suite = _with_secrets(_as_suite(suite), keep_client_secrets)
    if trust_plugins:
        suite = suite.model_copy(update={"trust_plugins": True})
    if device is not None:
        suite = suite.model_copy(update={"device": device})
    return runner.run_suite(suite, out, data_root, quiet, jobs, executor, address, threads)


def audit(
    suite: str | Path | dict[str, Any] | Suite,
    out: str | Path,
    data_root: str | None = None,
    *,
    canaries: int | None = None,
    quiet: bool = True,
    jobs: int = 1,
    executor: Executor = "serial",
    address: str = "local",
    keep_client_secrets: bool = False,
    device: str | None = None,
    trust_plugins: bool = False,
    threads: int | None = None,
) -> RunSummary:
    """``run_suite`` with the canary audit on (the suite's ``audit:`` block, or ``canaries``
    per audited claim): every cell with a DP defense gets its lower bounds on ε beside the
    claimed ones in the store; cells stored without them are trained again (same seed, same
    numbers) and audited."""
    with trusting(trust_plugins):
        suite = _as_suite(suite)
    try:
        entry = AuditEntry(canaries=canaries) if canaries is not None else suite.audit
    except ValidationError as exc:
        raise ConfigError(f"invalid audit\n{format_errors(exc, 'audit')}") from None
    return run_suite(
        suite.model_copy(update={"audit": entry or AuditEntry()}),
        out,
        data_root,
        quiet=quiet,
        jobs=jobs,
        executor=executor,
        address=address,
        keep_client_secrets=keep_client_secrets,
        device=device,
        trust_plugins=trust_plugins,
        threads=threads,
    )


def privacy(out: str | Path) -> dict[str, dict[str, Any]]:
    """A results folder's privacy figures, per cell id (cells of a σ sweep or of several
    seeds share a label, so the label cannot key them): its ``label``, ``epsilons`` (ε per
    adversary × unit, ∞ where nothing is guaranteed, with its note), ``metric_epsilons``
    (metric-DP's ε(ρ) the same way, with ρ) and ``audits`` (the canary audit's lower bound
    beside the claimed ε, per audited claim)."""
    store = ResultsStore(out, read_only=True)
    try:
        return {
            c.cell_id: {
                "label": c.label,
                "epsilons": list(c.epsilons),
                "metric_epsilons": list(c.metric_epsilons),
                "audits": list(c.audits),
            }
            for c in store.cells()
        }
    finally:
        store.close()


def results(out: str | Path) -> pandas.DataFrame:
    """A results folder as one DataFrame: a row per cell × attack, with the cell's setting,
    its utility (``utility.*``), ε per adversary and unit (``epsilon.<adversary>.<unit>``)
    and the attack's metrics (``metric.*``) as columns (``fgl_workbench.reports.frame`` lists
    them)."""
    from fgl_workbench.reports.frame import results_frame

    return results_frame(out)


def history(out: str | Path) -> pandas.DataFrame:
    """A results folder's training histories as one DataFrame: a row per cell × round, with
    the cell's setting and what its target measured that round (``val_accuracy``,
    ``train_loss``, ...; ``fgl_workbench.reports.frame`` lists the columns)."""
    from fgl_workbench.reports.frame import history_frame

    return history_frame(out)


def log_mlflow(out: str | Path, tracking_uri: str, experiment: str | None = None) -> Logged:
    """Logs every cell of a results folder to MLflow at ``tracking_uri``: a run per cell with
    its configuration as params, utility, ε and attack metrics (``fgl_workbench.reports.mlflow_log``
    says what and how); logging again updates those runs. Needs ``fgl-workbench[mlflow]``."""
    from fgl_workbench.reports.mlflow_log import connect, log_results

    return log_results(out, connect(tracking_uri), experiment)


def _with_secrets(suite: Suite, keep: bool) -> Suite:
    return suite.model_copy(update={"keep_client_secrets": True}) if keep else suite


def _as_suite(suite: str | Path | dict[str, Any] | Suite) -> Suite:
    if isinstance(suite, str | Path):
        return load_suite(suite)
    if isinstance(suite, dict):
        return parse_suite(suite)
    return suite


def attack(
    out: str | Path,
    attacks: list[dict[str, Any]],
    data_root: str | None = None,
    *,
    quiet: bool = True,
    jobs: int = 1,
    device: str | None = None,
    trust_plugins: bool = False,
    threads: int | None = None,
) -> tuple[int, int]:
    """Runs attacks (``[{"name": ..., "params": {...}}]``) against the trained targets a
    finished run stored, without retraining, on ``device`` (default: the one the folder's
    cells ran on); their rows join the results folder. Plug-ins run unfenced only with
    ``trust_plugins``; ``quiet`` and ``threads`` as ``run_suite``'s. Returns (cells
    attacked, cells without a stored target)."""
    entries = []
    for i, raw in enumerate(attacks):
        try:
            entry = AttackEntry(**raw)
        except ValidationError as exc:
            raise ConfigError(f"invalid attack\n{format_errors(exc, f'attacks[{i}]')}") from None
        with trusting(trust_plugins):
            config = ATTACKS.get(entry.name, f"attacks[{i}].name").Config
            try:
                config(**entry.params)
            except ValidationError as exc:
                found = format_errors(exc, f"attacks[{i}].params", model=config)
                raise ConfigError(f"invalid attack\n{found}") from None
        entries.append(entry)
    return attack_stored(
        out,
        entries,
        data_root,
        jobs,
        quiet,
        device=device,
        trust_plugins=trust_plugins,
        threads=threads,
    )


def build_report(out: str | Path, sources: Sequence[str | Path] | None = None) -> Path:
    """Writes ``report.html`` and ``report.pdf`` into ``out`` for that results folder, or
    comparing the folders ``sources``; returns the HTML."""
    from fgl_workbench.reports import build_report as write_report

    return write_report(out, sources)


def components(kind: Kind) -> dict[str, str]:
    """Every registered target, attack or defense (plug-ins included) → where it came from:
    ``built-in``, an entry point with its distribution, or a module reference."""
    registries = {"targets": TARGETS, "attacks": ATTACKS, "defenses": DEFENSES}
    if kind not in registries:
        raise ConfigError(f"kind: expected one of {', '.join(registries)} (got {kind!r})")
    registry = registries[kind]
    return {name: registry.origin(name) for name in registry}


__all__ = [
    "ATTACKS",
    "DEFENSES",
    "TARGETS",
    "AttackInput",
    "AttackOutput",
    "Gaussian",
    "Laplace",
    "MetricGaussian",
    "PrivacyLedger",
    "ResultsStore",
    "ModelAudit",
    "RunSummary",
    "ScoreAudit",
    "SubsampledGaussian",
    "Suite",
    "TrainedTarget",
    "applied",
    "attack",
    "audit",
    "audit_model",
    "audit_scores",
    "audit_uploads",
    "background_knowledge",
    "build_federation",
    "build_report",
    "client_view",
    "components",
    "epsilon",
    "history",
    "load_dataset",
    "load_suite",
    "log_mlflow",
    "make_partition",
    "parse_suite",
    "privacy",
    "querier_view",
    "run_suite",
    "server_view",
]
