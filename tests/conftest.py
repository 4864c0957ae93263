"""Shared fixtures. Real datasets come from ../shared/data (or $FGLWB_DATA); PyG's processed
files go to a per-session temporary cache so the raw folder is never written."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


def _shared_data() -> Path:
    env = os.environ.get("FGLWB_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data"


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ["FGLWB_CACHE"] = str(tmp_path_factory.mktemp("fglwb-cache"))


@pytest.fixture(scope="session")
def data_root() -> Path:
    root = _shared_data()
    if not (root / "Cora" / "raw").is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"real datasets missing in CI: expected {root}/Cora/raw")
        pytest.skip(f"real datasets not found at {root} (set FGLWB_DATA)")
    os.environ["FGLWB_DATA"] = str(root)
    return root


@pytest.fixture(scope="session")
def cora(data_root: Path):
    from fgl_workbench.data.catalog import load_dataset

    return load_dataset("Cora", root=data_root)


@pytest.fixture(scope="session")
def proteins(data_root: Path):
    from fgl_workbench.data.catalog import load_dataset

    return load_dataset("PROTEINS", root=data_root)


@pytest.fixture(scope="session")
def small_csbm():
    from fgl_workbench.data.synthetic import CSBMParams, csbm

    return csbm(CSBMParams(num_nodes=400, num_classes=4, num_features=16, seed=3))


@pytest.fixture(scope="session")
def small_graphs():
    from fgl_workbench.data.synthetic import SyntheticGraphsParams, synthetic_graphs

    return synthetic_graphs(SyntheticGraphsParams(num_graphs=120, seed=3))


@pytest.fixture(scope="session")
def querier_input():
    """Builds the external querier's attack input against a trained target, with the
    membership challenge kept apart for scoring."""
    from fgl_workbench.adversary.threat import background_knowledge, querier_view
    from fgl_workbench.attacks import AttackInput
    from fgl_workbench.attacks.challenges import membership_challenge

    def build(federation, trained, seed: int = 0):
        challenge = membership_challenge(federation, seed)
        view, knowledge = (
            querier_view(trained, federation),
            background_knowledge(federation, trained),
        )
        return AttackInput(view, knowledge, challenge.candidates), challenge

    return build


@pytest.fixture(scope="session")
def cell_inputs():
    """Builds what a cell's attack families share, for a target trained in a test (the
    public streams of seed 0, no shared reference models)."""
    from functools import partial

    from fgl_workbench.adversary.threat import background_knowledge
    from fgl_workbench.attacks.family import CellInputs
    from fgl_workbench.seeding import Streams

    def build(trained, federation, delta: float = 1e-5) -> CellInputs:
        knowledge = background_knowledge(federation, trained)
        return CellInputs(
            trained, federation, knowledge, None, partial(Streams.public().seed, 0), delta
        )

    return build


@pytest.fixture(scope="session")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make demo`'s run (examples/quickstart.yaml through the command line), once per
    session: the end-to-end test and the browser test read the same folder."""
    from fgl_workbench.interface.cli import main

    out = tmp_path_factory.mktemp("quickstart") / "qs"
    assert main(["run", str(REPO / "examples/quickstart.yaml"), "--out", str(out), "--quiet"]) == 0
    return out


@pytest.fixture(scope="session")
def assert_same():
    """Compares stored results: structure and text exactly, numbers to rtol 1e-9."""
    return _assert_same


def _assert_same(found: Any, expected: Any, where: str = "") -> None:
    """Exact for text and structure; numbers to rtol 1e-9, not ==, because CI runs on another
    CPU whose BLAS may round the last bits differently."""
    if isinstance(expected, dict):
        assert isinstance(found, dict) and found.keys() == expected.keys(), where
        for k in expected:
            _assert_same(found[k], expected[k], f"{where}/{k}")
    elif isinstance(expected, list):
        assert isinstance(found, list) and len(found) == len(expected), where
        for i, (f, e) in enumerate(zip(found, expected, strict=True)):
            _assert_same(f, e, f"{where}[{i}]")
    elif isinstance(expected, float) and not isinstance(found, str | type(None)):
        assert math.isclose(found, expected, rel_tol=1e-9) or (
            math.isnan(found) and math.isnan(expected)
        ), f"{where}: {found} != {expected}"
    else:
        assert found == expected, f"{where}: {found!r} != {expected!r}"
