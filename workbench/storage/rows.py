"""What a results folder's rows may hold, checked before any reader uses them.

A received folder is untrusted input: its database can hold any type in any column and any
text in a JSON field. Each row is parsed here into typed models (strict types, the keys the
readers use, strings and JSON capped), so a malformed row is one line naming the file, the
row and the field instead of a traceback, a hang or an unbounded allocation later on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from fgl_workbench.accountants.scope import Adversary, Unit
from fgl_workbench.errors import ConfigError

TEXT_CAP = 1_000  # characters of a label, a name, a key, or any string inside a JSON field
NOTE_CAP = 10_000  # characters of a reason or an ε's note
JSON_CAP = 1_000_000  # characters of one stored JSON field
DEPTH_CAP = 32  # nesting of one stored JSON field

Text = Annotated[str, StringConstraints(max_length=TEXT_CAP)]
Note = Annotated[str, StringConstraints(max_length=NOTE_CAP)]
Count = Annotated[int, Field(ge=0)]


class _Checked(BaseModel):
    """Strict types (no "1" for 1), keys beyond the declared ones kept as they are."""

    model_config = ConfigDict(strict=True, extra="allow")


class Named(_Checked):
    name: Text


class Configured(Named):
    """A dataset or a defense: its name and the parameters the suite set."""

    params: dict[Text, Any] = {}


class PartitionConfig(_Checked):
    method: Text
    num_clients: Annotated[int, Field(ge=1)]
    aux_fraction: float | None = None


class TargetConfig(Named):
    params: dict[Text, Any] = {}
    defenses: list[Configured] = []


class CellConfig(_Checked):
    dataset: Configured
    partition: PartitionConfig
    target: TargetConfig
    seed: int


class Round(_Checked):
    """One training round of a cell's history: its index and the numbers measured then
    (validation accuracy, mean training loss, ...; NaN or None where not measured)."""

    round: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    __pydantic_extra__: dict[Text, float | None]


class Bytes(_Checked):
    up: Count
    down: Count


class Communication(_Checked):
    rounds: Count
    bytes: Bytes


class ClientStats(_Checked):
    client_id: int
    size: Count
    num_train: Count
    num_val: Count
    num_test: Count
    label_histogram: list[Count]
    num_edges: Count
    edge_homophily: float | None


class Utility(_Checked):
    accuracy: float | None
    macro_f1: float | None


class Metrics(_Checked):
    """The figures readers compute with are numbers (or None where not measured)."""

    auc: float | None = None
    auc_ci_low: float | None = None
    auc_ci_high: float | None = None
    chance_auc: float | None = None
    epsilon_lb: float | None = None
    epsilon_lb_ceiling: float | None = None


class EpsilonRow(_Checked):
    adversary: Adversary
    unit: Unit
    epsilon: float
    delta: float
    note: Note
    epsilon_pld: float | None = None


class MetricEpsilonRow(EpsilonRow):
    rho: float


class AuditRow(_Checked):
    defense: Text
    adversaries: Text
    unit: Unit
    mechanism: Text
    claimed: float
    lower_bound: float
    confidence: float
    delta: float
    canaries: Count
    guesses: Count
    correct: Count
    seconds: float
    ceiling: float | None = None
    fdp_epsilon: float | None = None
    mu: float | None = None
    mu_ceiling: float | None = None
    holds: int | None = None


class StoredSuite(_Checked):
    """The suite a folder records (shown in the report; its δ is the ROC ceilings' δ)."""

    name: Text | None = None
    delta: Annotated[float, Field(gt=0, lt=1)] = 1e-5


class CellColumns(_Checked):
    cell_id: Text
    label: Text
    epsilon: float | None
    seconds_partition: float
    seconds_train: float


class AttackColumns(_Checked):
    cell_id: Text
    attack_key: Text
    attack: Text
    status: Literal["ok", "not_applicable"]
    reason: Note | None
    artifact: Text | None
    seconds: float
    fence: Text | None  # a plug-in's: how it was fenced; None: built in


def checked(
    model: type[BaseModel],
    value: Any,
    where: str,
    error: type[ConfigError] = ConfigError,
    whole: str = "the row",
) -> Any:
    """``value`` once ``model`` accepts it (returned as stored), else one line (``error``)
    naming ``where`` (the file and the row) and the first field that does not fit
    (``whole`` where the value itself does not)."""
    try:
        model.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or whole
        raise error(f"{where}, field {field}: {first['msg']}") from None
    return value


def parsed_json(text: Any, model: type[BaseModel] | None, where: str, items: bool = False) -> Any:
    """A stored JSON field: capped in size, depth and string length, then checked by
    ``model`` (each item of a list with ``items``)."""
    if not isinstance(text, str) or len(text) > JSON_CAP:
        raise ConfigError(f"{where}: expected JSON text of at most {JSON_CAP:,} characters")
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ConfigError(f"{where}: not JSON ({str(exc)[:80]})") from None
    bounded(value, where)
    if model is None:
        return value
    if items:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list")
        return [checked(model, v, f"{where}[{i}]") for i, v in enumerate(value)]
    return checked(model, value, where)


def bounded(value: Any, where: str, depth: int = 0) -> None:
    """Strings and keys at most ``TEXT_CAP`` characters, nesting at most ``DEPTH_CAP`` deep."""
    if depth > DEPTH_CAP:
        raise ConfigError(f"{where}: nested more than {DEPTH_CAP} deep")
    if isinstance(value, str) and len(value) > TEXT_CAP:
        raise ConfigError(f"{where}: a string longer than {TEXT_CAP:,} characters")
    children = [*value, *value.values()] if isinstance(value, dict) else value
    if isinstance(value, dict | list):
        for child in children:
            bounded(child, where, depth + 1)


def row_name(path: Path, table: str, key: Any) -> str:
    """How a failure names a stored row: the file, the table and the row's key."""
    return f"{path}: {table} row {str(key)[:40]!r}"
