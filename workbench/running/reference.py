"""The suite YAML reference, generated from the pydantic models that validate a suite and
every registered component's parameters, so the documentation cannot drift from the code
(docs/suite-reference.md is this module's output; a test compares them)."""

from __future__ import annotations

import json
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

HEADER = """# Suite YAML reference

Generated from the code by `python -m fgl_workbench.running.reference > docs/suite-reference.md`; a
test fails when the two differ. Every field below is validated: an unknown key, an unknown name or
an out-of-range value is refused with its path and the valid choices.
"""


def type_name(annotation: Any) -> str:
    """A readable type: ``int``, ``'a' | 'b'``, ``list[float]``, ``X | None``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(type_name(a) for a in args)
    if origin is not None:
        inner = ", ".join(type_name(a) for a in args)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation))


def default_text(field: Any, given: Any = PydanticUndefined) -> str:
    """The default, or ``given`` (the value a parent model's default instance holds)."""
    if given is not PydanticUndefined:
        value = given
    elif field.is_required():
        return "required"
    else:
        value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "(fields below)"
    return json.dumps(value, default=str, ensure_ascii=False)


def bounds(field: Any) -> str:
    """The field's numeric bounds (``≥ 1, ≤ 8``) from its constraints."""
    marks = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<", "min_length": "length ≥"}
    found = [
        f"{sign} {getattr(m, key)}"
        for m in field.metadata
        for key, sign in marks.items()
        if getattr(m, key, None) is not None
    ]
    return f" ({', '.join(found)})" if found else ""


def model_rows(
    model: type[BaseModel], prefix: str = "", defaults: BaseModel | None = None
) -> list[str]:
    """Table rows of ``model``'s fields, nested models' fields as dotted rows after them;
    ``defaults``: the instance a parent model holds by default (its values are the
    defaults that apply)."""
    rows, nested = [], []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        given = getattr(defaults, name) if defaults is not None else PydanticUndefined
        text = (field.description or "").replace("|", "\\|").replace("\n", " ")
        kind = type_name(field.annotation) + bounds(field)
        rows.append(f"| `{path}` | {kind} | {default_text(field, given)} | {text} |")
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            value = (
                given
                if given is not PydanticUndefined
                else field.get_default(call_default_factory=True)
            )
            nested.append((path, annotation, value if isinstance(value, BaseModel) else None))
    for path, sub, value in nested:
        rows += model_rows(sub, f"{path}.", value)
    return rows


def model_table(model: type[BaseModel]) -> list[str]:
    if not model.model_fields:
        return ["No parameters.", ""]
    return ["| field | type | default | meaning |", "|---|---|---|---|", *model_rows(model), ""]


def reference() -> str:
    import fgl_workbench.data  # noqa: F401  (registers datasets and partitioners)
    from fgl_workbench.attacks import ATTACKS
    from fgl_workbench.attacks.families import adversaries
    from fgl_workbench.data.catalog import DATASETS
    from fgl_workbench.data.partition import PARTITIONERS
    from fgl_workbench.defenses import DEFENSES
    from fgl_workbench.registry import BUILT_IN
    from fgl_workbench.running.suite import (
        AttackEntry,
        DatasetEntry,
        DefenseEntry,
        PartitionEntry,
        Suite,
        TargetEntry,
    )
    from fgl_workbench.targets import TARGETS

    out = [HEADER, "## The suite", ""]
    for title, model in (
        ("top level", Suite),
        ("`datasets[]`", DatasetEntry),
        ("`partitions[]`", PartitionEntry),
        ("`targets[]`", TargetEntry),
        ("`targets[].defenses[]`", DefenseEntry),
        ("`attacks[]`", AttackEntry),
    ):
        out += [f"### {title}", "", *model_table(model)]
    sections = (
        ("Datasets (`datasets[].params`)", DATASETS, lambda s: s.params, lambda s: s.level),
        ("Partitions (`partitions[].params`)", PARTITIONERS, lambda s: s.params, lambda s: s.level),
        ("Targets (`targets[].params`)", TARGETS, lambda t: t.Config, lambda t: t.level),
        (
            "Defenses (`targets[].defenses[].params`)",
            DEFENSES,
            lambda d: d.Config,
            lambda d: f"stage: {d.stage}",
        ),
        (
            "Attacks (`attacks[].params`)",
            ATTACKS,
            lambda a: a.Config,
            lambda a: f"{a.family}; adversary: {', '.join(adversaries(a))}",
        ),
    )
    out += [
        "## Threat models",
        "",
        "Who each attack's adversary is (its `adversary` choices), what it observes, and what "
        "it knows besides. Membership labels, hidden attributes and the edges asked about are "
        "never in its input: they score it afterwards.",
        "",
        "| attack | infers | adversary | sees | knows |",
        "|---|---|---|---|---|",
    ]
    for name in ATTACKS:
        if ATTACKS.origin(name) == BUILT_IN:
            a = ATTACKS.get(name)
            out.append(
                f"| `{name}` | {a.family} | {', '.join(adversaries(a))} | {a.threat.sees} | "
                f"{a.threat.knows} |"
            )
    out.append("")
    for title, registry, config, what in sections:
        out += [f"## {title}", ""]
        for name in registry:
            if hasattr(registry, "origin") and registry.origin(name) != BUILT_IN:
                continue  # plug-ins document themselves
            item = registry.get(name)
            out += [f"### `{name}` ({what(item)})", "", *model_table(config(item))]
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(reference(), end="")
