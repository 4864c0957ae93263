"""Suite YAML: a grid of (dataset, partition, target, seed) cells × the attacks to run on each.

The file is validated in two passes, both ending in a ``ConfigError`` whose lines name the
field (``targets[0].params.rounds``) and what was expected: pydantic checks the structure and
unknown keys; then every component's ``params`` is checked against that component's own
config model, and every name against its registry (the error lists the valid choices).

A suite is untrusted input too: its size is capped before anything grows from it (the file's
bytes, the YAML's nodes with aliases counted at every use, each list, and the cells the grid
would expand to), and every number in a component's ``params`` is bounded, so a hostile or
mistyped file is one error naming the cap, never a hang or an overflow much later."""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_serializer,
    field_validator,
)

import fgl_workbench.data  # noqa: F401  (registers partitioners)
from fgl_workbench.attacks import ATTACKS
from fgl_workbench.attacks.plugins import trusting
from fgl_workbench.data.catalog import DATASETS
from fgl_workbench.data.partition import PARTITIONERS, Membership
from fgl_workbench.defenses import DEFENSES
from fgl_workbench.defenses.calibration import calibratable
from fgl_workbench.defenses.calibration import refusal as calibration_refused
from fgl_workbench.errors import ConfigError
from fgl_workbench.registry import did_you_mean
from fgl_workbench.running.calibration import refusal
from fgl_workbench.targets import TARGETS

MAX_SUITE_BYTES = 1 << 20  # hand-written suites are a few KB; YAML is parsed whole first
MAX_NODES = 100_000  # scalars, lists and mappings in the parsed YAML, aliases at every use
MAX_DEPTH = 32  # nesting of lists and mappings: suites need under ten levels
MAX_SEEDS = 1_000
MAX_ENTRIES = 1_000  # per list: datasets, partitions, targets, attacks, a sweep's values
MAX_CELLS = 10_000  # each cell trains a federation: a larger grid is a typo, not a plan
# any number in a component's params: squares and products of a few such stay finite in
# float32 (3.4e38), where 1e300 would pass here and overflow in training or encoding
MAX_MAGNITUDE = 1e12
MAX_SHOWN = 80  # characters of an offending value quoted in an error
LISTS = ("datasets", "partitions", "targets", "attacks")

_RATIOS = TypeAdapter(tuple[float, float, float], config=ConfigDict(allow_inf_nan=False))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class DatasetEntry(_Strict):
    name: str
    params: dict[str, Any] = {}


class PartitionEntry(_Strict):
    method: str
    num_clients: int = Field(ge=1, le=10_000)
    params: dict[str, Any] = {}
    split: tuple[float, float, float] | Literal["public"] | None = Field(
        None,
        description="train/val/test ratios; default 0.2/0.4/0.4 (nodes), 0.7/0.1/0.2 (graphs); "
        "'public': the dataset's published split (Planetoid's), the aux pool drawn outside it",
    )
    aux_fraction: float = Field(0.1, ge=0.0, lt=1.0, description="attacker's auxiliary pool")
    membership: Membership = Field(
        "transductive",
        description="node level: what each client trains on; transductive: its whole local "
        "graph, test nodes unlabelled in it; inductive: only the subgraph its training nodes "
        "induce (its validation nodes beside it, unconnected), so no non-member or edge of "
        "one reaches training (Olatunji et al.'s setting); test utility is then the released "
        "model's on the population graph",
    )

    @field_validator("split", mode="plain")
    @classmethod
    def _ratios_or_public(cls, value: Any) -> tuple[float, float, float] | str | None:
        """One form at a time, so a bad ratio is reported as one (not also as not 'public')."""
        if value is None or value == "public":
            return value
        if isinstance(value, str):
            raise ValueError("expected three ratios or 'public'")
        return _RATIOS.validate_python(value)

    @field_serializer("split")
    def _split_out(
        self, value: tuple[float, float, float] | str | None
    ) -> list[float] | str | None:
        """As the ratios were given: a plain validator leaves pydantic no union to dump by."""
        return list(value) if isinstance(value, tuple) else value


class DefenseEntry(_Strict):
    name: str
    params: dict[str, Any] = {}


class TargetEntry(_Strict):
    name: str
    params: dict[str, Any] = {}
    defenses: list[DefenseEntry] = []
    sweep: dict[str, list[Any]] = Field(
        {},
        description="dotted path -> values, e.g. {'defenses[0].params.noise_multiplier': "
        "[0.3, 1], 'params.lr': [0.01, 0.001]}: the entry expands to every combination",
    )


class AttackEntry(_Strict):
    name: str
    params: dict[str, Any] = {}

    @property
    def key(self) -> str:
        """Row key in the results store: the name plus a short hash of the params."""
        return f"{self.name}-{config_hash(self.params)[:8]}" if self.params else self.name


class AuditEntry(_Strict):
    """The canary audit (``audits``) of every cell with a DP defense, run after training."""

    canaries: int = Field(1000, ge=20, le=100_000, description="canaries per audited claim")


class Suite(_Strict):
    name: str
    seeds: list[Annotated[int, Field(ge=0, lt=2**32)]] = Field(
        default_factory=lambda: [0], min_length=1
    )
    delta: float = Field(1e-5, gt=0.0, lt=1.0, description="δ at which ε is reported")
    data_root: str | None = None
    datasets: list[DatasetEntry] = Field(min_length=1)
    partitions: list[PartitionEntry] = Field(min_length=1)
    targets: list[TargetEntry] = Field(min_length=1)
    attacks: list[AttackEntry] = []
    keep_client_secrets: bool = Field(
        False,
        description="keep the clients' CKKS secret key in the snapshots (curious-client "
        "attacks run offline; the results folder then holds it)",
    )
    audit: AuditEntry | None = Field(
        None, description="{canaries: N}: canary-audit every cell with a DP defense"
    )
    device: str = Field(
        "auto",
        pattern=r"^(auto|cpu|cuda(:\d+)?)$",
        description="where cells run: auto (a GPU when one is visible), cpu, cuda or cuda:N; "
        "`--device` overrides it. CKKS always runs on the CPU",
    )
    trust_plugins: bool = Field(
        False,
        description="run plug-in attacks even where the kernel cannot sandbox them (no "
        "unprivileged user namespaces, which both fences need): they can then read what the "
        "user can; their rows are marked",
    )
    reproducible: bool = Field(
        False,
        description="derive every stream (partition, training, DP noise, challenges, attacks) "
        "from the public seed, so another folder gives the same numbers; the store marks the "
        "run. Default: from a secret run key (OS entropy) kept in the results folder",
    )


@dataclass(frozen=True)
class Cell:
    dataset: DatasetEntry
    partition: PartitionEntry
    target: TargetEntry
    seed: int
    attacks: tuple[AttackEntry, ...]
    canaries: int = 0  # the canary audit's size; 0: no audit (not part of the cell's id)
    keep_secrets: bool = False  # snapshots keep the clients' secret key (not part of the id)
    trust_plugins: bool = False  # plug-ins may run unfenced (not part of the id)

    def config(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset.model_dump(),
            # membership only when inductive, so transductive cells keep their ids
            "partition": self.partition.model_dump(
                exclude={"membership"} if self.partition.membership == "transductive" else None
            ),
            # defenses only when present, so undefended cells keep their ids; a swept entry
            # has been expanded already, so a cell hashes as if written out by hand
            "target": self.target.model_dump(
                exclude={"sweep"} if self.target.defenses else {"sweep", "defenses"}
            ),
            "seed": self.seed,
        }

    @property
    def cell_id(self) -> str:
        return config_hash(self.config())[:16]

    @property
    def label(self) -> str:
        p = self.partition
        target = "+".join([self.target.name] + [d.name for d in self.target.defenses])
        inductive = "-inductive" if p.membership == "inductive" else ""
        return f"{self.dataset.name}/{p.method}-{p.num_clients}{inductive}/{target}/seed{self.seed}"


def config_hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def load_suite(path: str | Path) -> Suite:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"suite file not found: {path}")
    size = path.stat().st_size
    if size > MAX_SUITE_BYTES:
        raise ConfigError(
            f"{path}: {size} bytes, over the cap of {MAX_SUITE_BYTES} bytes for a suite file"
        )
    try:
        raw = yaml.load(path.read_bytes(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:  # PyYAML's message spans lines: said in one
        raise ConfigError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None
    except (UnicodeDecodeError, ValueError) as exc:  # bytes that are no text; an int too long
        raise ConfigError(f"{path}: not a readable YAML text ({exc})") from None
    return parse_suite(raw, source=str(path))


def parse_suite(raw: Any, source: str = "suite") -> Suite:
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level")
    too_large = _over_caps(raw)
    if too_large:
        raise ConfigError(f"{source}: too large: {too_large}")
    with trusting(raw.get("trust_plugins") is True):  # plug-ins may be described unfenced
        return _parsed(raw, source)


def _parsed(raw: dict[str, Any], source: str) -> Suite:
    try:
        suite = Suite(**raw)
    except ValidationError as exc:
        # the sections that do parse are checked too, so one reading lists every problem
        found = [format_errors(exc, model=Suite), *_check_components(_parsed_sections(raw))]
        raise ConfigError(f"{source}: invalid suite\n" + "\n".join(found)) from None
    problems = _check_components(suite)
    if not problems and count_cells(suite) > MAX_CELLS:
        problems = [
            f"  the grid expands to {count_cells(suite)} cells, over the cap of {MAX_CELLS} "
            "(datasets × fitting partitions × targets with their sweeps × seeds)"
        ]
    if not problems:
        targets, problems = expand_sweeps(suite.targets)
        suite = suite.model_copy(update={"targets": targets})
    if not problems:
        problems = _check_components(suite)
    if problems:
        raise ConfigError(f"{source}: invalid suite\n" + "\n".join(problems))
    return suite


def _over_caps(raw: dict[str, Any]) -> str:
    """The first cap the raw suite exceeds, named ('' when none): checked before pydantic or
    any expansion reads it, in time proportional to the caps, not to the input."""
    caps = {"seeds": MAX_SEEDS} | dict.fromkeys(LISTS, MAX_ENTRIES)
    for key, cap in caps.items():
        value = raw.get(key)
        if isinstance(value, list) and len(value) > cap:
            return f"{key}: {len(value)} entries, over the cap of {cap}"
    nodes, depth = _size(raw, MAX_NODES)
    if nodes > MAX_NODES:
        return f"more than {MAX_NODES} YAML values (aliases count at every use), the cap"
    if depth > MAX_DEPTH:
        return f"nested more than {MAX_DEPTH} levels deep, the cap"
    targets = raw.get("targets")
    for i, t in enumerate(targets if isinstance(targets, list) else []):
        sweep = t.get("sweep") if isinstance(t, dict) else None
        for path, values in sweep.items() if isinstance(sweep, dict) else ():
            if isinstance(values, list) and len(values) > MAX_ENTRIES:
                return (
                    f"targets[{i}].sweep.{path}: {len(values)} values, over the cap of "
                    f"{MAX_ENTRIES}"
                )
    return ""


def _size(value: Any, budget: int) -> tuple[int, int]:
    """(values, depth) of ``value``, counting stops once past ``budget`` values: a shared
    (YAML alias) or self-referencing part counts at every use, as every later step sees it."""
    seen, deepest = 0, 0
    stack = [(value, 0)]
    while stack and seen <= budget:
        node, depth = stack.pop()
        seen += 1
        deepest = max(deepest, depth)
        if isinstance(node, dict):
            stack.extend((child, depth + 1) for child in [*node.keys(), *node.values()])
        elif isinstance(node, list):
            stack.extend((child, depth + 1) for child in node)
    return seen, deepest


def count_cells(suite: Suite) -> int:
    """How many cells ``expand`` would make, without making them (registered names only)."""
    targets = sum(math.prod(len(v) for v in t.sweep.values()) for t in suite.targets)
    fitting = sum(
        PARTITIONERS.get(p.method).level == DATASETS.get(d.name).level
        for d in suite.datasets
        for p in suite.partitions
    )
    return fitting * targets * len(suite.seeds)


def expand_sweeps(targets: list[TargetEntry]) -> tuple[list[TargetEntry], list[str]]:
    """Every target entry with a ``sweep`` becomes one entry per combination of its values
    (in the order the values are listed), with no ``sweep`` left; (entries, problems)."""
    out: list[TargetEntry] = []
    problems: list[str] = []
    for i, t in enumerate(targets):
        if not t.sweep:
            out.append(t)
            continue
        base = t.model_dump(exclude={"sweep"})
        paths = list(t.sweep)
        for path in paths:
            where = f"  targets[{i}].sweep.{path}"
            if not t.sweep[path]:
                problems.append(f"{where}: expected a non-empty list of values")
            elif not _settable(base, path):
                problems.append(
                    f"{where}: expected a path into params or defenses[j].params "
                    "(e.g. params.lr, defenses[0].params.noise_multiplier)"
                )
        if problems:
            continue
        for values in itertools.product(*(t.sweep[p] for p in paths)):
            entry = copy.deepcopy(base)
            for path, value in zip(paths, values, strict=True):
                _set(entry, path, value)
            out.append(TargetEntry(**entry))
    return out, problems


def _steps(path: str) -> list[str | int]:
    steps: list[str | int] = []
    for part in path.split("."):
        name, _, rest = part.partition("[")
        steps.append(name)
        if rest:
            steps.append(int(rest.rstrip("]")))
    return steps


def _settable(entry: dict, path: str) -> bool:
    try:
        steps = _steps(path)
    except ValueError:
        return False
    if steps[:1] == ["params"]:
        return len(steps) > 1
    if len(steps) < 4 or steps[0] != "defenses" or steps[2] != "params":
        return False
    return isinstance(steps[1], int) and 0 <= steps[1] < len(entry["defenses"])


def _set(entry: dict, path: str, value: Any) -> None:
    steps = _steps(path)
    node: Any = entry
    for step in steps[:-1]:
        node = node[step] if isinstance(step, int) else node.setdefault(step, {})
    node[steps[-1]] = value


def format_errors(exc: ValidationError, prefix: str = "", model: Any = None) -> str:
    """One line per error, named by its path. With the ``model`` the input was checked
    against, an unknown parameter also gets the valid ones (and the nearest, if close)."""
    lines = []
    for err in exc.errors():
        loc = prefix + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
        if err["type"] == "extra_forbidden":
            word = "parameter" if "params" in prefix + str(err["loc"]) else "field"
            fields = _fields_at(model, err["loc"][:-1])
            hint = did_you_mean(str(err["loc"][-1]), fields)
            valid = f"; valid {word}s: {', '.join(fields)}" if fields else ""
            lines.append(f"  {loc.lstrip('.')}: unknown {word}{hint}{valid}")
            continue
        got = f" (got {_shown(err['input'])})" if err["type"] != "missing" else ""
        lines.append(f"  {loc.lstrip('.')}: {err['msg']}{got}")
    return "\n".join(lines)


def _shown(value: Any) -> str:
    """The offending input as the error quotes it: its repr, shortened to one short line."""
    try:
        text = repr(value)
    except ValueError:  # holds an integer past Python's digit limit for str()
        return f"a {type(value).__name__} too long to show"
    return text if len(text) <= MAX_SHOWN else f"{text[: MAX_SHOWN - 3]}..."


def _fields_at(model: Any, path: tuple) -> list[str]:
    """The field names of the (nested) model at ``path`` below ``model``, stepping through
    lists (``partitions[0]``) and optional fields; [] where the path leads to no model."""
    for step in path:
        if isinstance(step, int):
            model = _model_in(model, of_list=True)
            continue
        model = _model_in(model)
        field = model.model_fields.get(step) if model is not None else None
        model = field.annotation if field is not None else None
    model = _model_in(model)
    return list(model.model_fields) if model is not None else []


def _model_in(annotation: Any, of_list: bool = False) -> type[BaseModel] | None:
    """The model an annotation holds: itself, inside ``X | None``, or (``of_list``) the
    items of ``list[X]``."""
    if of_list:
        args = typing.get_args(annotation) if typing.get_origin(annotation) is list else ()
        return _model_in(args[0]) if args else None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    models = [a for a in typing.get_args(annotation) if _model_in(a) is not None]
    return models[0] if len(models) == 1 else None


@dataclass(frozen=True)
class Sections:
    """The component lists of a suite (all of them, or those that parse on their own)."""

    datasets: list[DatasetEntry | None]
    partitions: list[PartitionEntry | None]
    targets: list[TargetEntry | None]
    attacks: list[AttackEntry | None]


def _parsed_sections(raw: dict[str, Any]) -> Sections:
    """Each list section's entries that are valid on their own, for the component checks
    of a suite whose other parts are not."""

    def entries(key: str, model: type[BaseModel]) -> list:
        items = raw.get(key)
        out = []
        for item in items if isinstance(items, list) else []:
            try:
                out.append(model.model_validate(item) if isinstance(item, dict) else None)
            except ValidationError:
                out.append(None)  # its own errors are in the suite's
        return out

    return Sections(
        entries("datasets", DatasetEntry),
        entries("partitions", PartitionEntry),
        entries("targets", TargetEntry),
        entries("attacks", AttackEntry),
    )


def _check_components(suite: Suite | Sections) -> list[str]:
    """Every entry's component name against its registry and its params against the
    component's config. Entries given as None (they did not parse) are skipped."""
    problems: list[str] = []

    def check(field: str, registry: Any, name: str, params: dict, config_of: Any) -> None:
        try:
            component = registry.get(name, field)
        except ConfigError as exc:  # unknown, or a plug-in that failed to load
            problems.append(f"  {exc}" if str(exc).startswith(field) else f"  {field}: {exc}")
            return
        model = config_of(component)
        prefix = field.rsplit(".", 1)[0] + ".params"
        try:
            model(**params)
        except ValidationError as exc:
            problems.append(format_errors(exc, prefix=prefix, model=model))
            return
        except ConfigError as exc:  # a plug-in's describer failed on them
            problems.append(f"  {prefix}: {exc}")
            return
        problems.extend(_out_of_range(prefix, params))

    for i, d in enumerate(suite.datasets):
        if d is not None:
            check(f"datasets[{i}].name", DATASETS, d.name, d.params, lambda s: s.params)
    for i, p in enumerate(suite.partitions):
        if p is None:
            continue
        check(f"partitions[{i}].method", PARTITIONERS, p.method, p.params, lambda s: s.params)
        if isinstance(p.split, tuple) and (min(p.split) < 0 or abs(sum(p.split) - 1) > 1e-6):
            problems.append(
                f"  partitions[{i}].split: ratios must be >= 0 and sum to 1 (got {list(p.split)})"
            )
        known = p.method in list(PARTITIONERS)
        if p.membership == "inductive" and known and PARTITIONERS.get(p.method).level != "node":
            problems.append(
                f"  partitions[{i}].membership: 'inductive' is a node-level setting; "
                f"'{p.method}' partitions graph-level data, whose clients already train on "
                "their training graphs alone"
            )
    for i, t in enumerate(suite.targets):
        if t is None:
            continue
        check(f"targets[{i}].name", TARGETS, t.name, t.params, lambda t: t.Config)
        for j, d in enumerate(t.defenses):
            field = f"targets[{i}].defenses[{j}].name"
            if _asks_calibration(d) and not calibratable(d.name):
                problems.append(
                    f"  targets[{i}].defenses[{j}].params.target_epsilon: {d.name} cannot be "
                    f"calibrated by ε: {calibration_refused(d.name)}"
                )
                continue
            check(field, DEFENSES, d.name, d.params, lambda d: d.Config)
        problems += _calibration_problems(i, t)
    for i, a in enumerate(suite.attacks):
        if a is not None:
            check(f"attacks[{i}].name", ATTACKS, a.name, a.params, lambda a: a.Config)
    if problems or isinstance(suite, Sections):
        return problems
    for i, d in enumerate(suite.datasets):
        level = DATASETS.get(d.name).level
        fits = [n for n in PARTITIONERS if PARTITIONERS.get(n).level == level]
        if not any(p.method in fits for p in suite.partitions):
            problems.append(
                f"  datasets[{i}]: '{d.name}' is {level}-level but no partition fits it; "
                f"add one of: {', '.join(fits)}"
            )
    return problems + _client_count_problems(suite)


def _client_count_problems(suite: Suite) -> list[str]:
    """A defense config whose validity depends on how many clients take part (it defines
    ``check_clients``, e.g. SecAgg's threshold t > n/2), checked against every partition's
    client count now rather than when a cell reaches it."""
    problems = []
    for i, t in enumerate(suite.targets):
        for j, d in enumerate(t.defenses):
            config = DEFENSES.get(d.name).Config(**d.params)
            if not hasattr(config, "check_clients"):
                continue
            for k, p in enumerate(suite.partitions):
                try:
                    config.check_clients(p.num_clients)
                except ConfigError as exc:
                    problems.append(f"  targets[{i}].defenses[{j}] with partitions[{k}]: {exc}")
    return problems


def _out_of_range(where: str, value: Any) -> list[str]:
    """Every number under ``where`` beyond ±``MAX_MAGNITUDE`` (or NaN), named by its path."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _out_of_range(f"{where}.{k}", v)]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _out_of_range(f"{where}[{i}]", v)]
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and not abs(value) <= MAX_MAGNITUDE:
        got = f"{value:.3g}" if isinstance(value, float) else f"{value.bit_length()} bits"
        return [f"  {where}: expected a magnitude at most {MAX_MAGNITUDE:g} (got {got})"]
    return []


def _calibration_problems(i: int, t: TargetEntry) -> list[str]:
    """A target entry whose defenses ask for calibration by ε the target cannot do: more
    than one calibrated defense, or a target with no planned ledger."""
    if not TARGETS.known(t.name):
        return []
    calibrated = [d.name for d in t.defenses if _asks_calibration(d) and calibratable(d.name)]
    why = refusal(TARGETS.get(t.name), calibrated)
    return [f"  targets[{i}].defenses: {why}"] if why else []


def _asks_calibration(d: DefenseEntry) -> bool:
    """A known defense given ``target_epsilon`` (unknown names are reported on their own)."""
    return d.params.get("target_epsilon") is not None and DEFENSES.known(d.name)


def expand(suite: Suite) -> list[Cell]:
    """The grid: every dataset × every partition of the same level × target × seed."""
    cells = []
    for d in suite.datasets:
        level = DATASETS.get(d.name).level
        for p in suite.partitions:
            if PARTITIONERS.get(p.method).level != level:
                continue
            for t in suite.targets:
                for s in suite.seeds:
                    canaries = suite.audit.canaries if suite.audit else 0
                    keep, trust = suite.keep_client_secrets, suite.trust_plugins
                    attacks = tuple(suite.attacks)
                    cells.append(Cell(d, p, t, s, attacks, canaries, keep, trust))
    return cells
