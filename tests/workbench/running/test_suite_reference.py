"""docs/suite-reference.md is generated from the models that validate suites: it must equal
the generator's output, so the reference cannot drift from the code."""

from pathlib import Path

from fgl_workbench.running.reference import reference

DOC = Path(__file__).resolve().parents[3] / "docs" / "suite-reference.md"


def test_the_committed_reference_is_the_generated_one():
    assert DOC.read_text() == reference(), (
        "docs/suite-reference.md is stale: "
        "python -m fgl_workbench.running.reference > docs/suite-reference.md"
    )


def test_every_builtin_component_and_nested_field_is_documented():
    text = reference()
    for name in ("opfgl", "mia-statistics-tracing", "masked-aggregation", "louvain-plus"):
        assert f"### `{name}`" in text
    assert (
        "| `surrogate.iterations` |" in text
        and "| `model.dropout` | float (≥ 0.0, < 1.0) | 0.0 |" in text
    )
