"""Property-based fuzzing of what a user types (issue 43): random suite YAML (structures,
fields and types around a valid suite, and raw text) and random arguments to every verb.
Each input ends in a result or a `WorkbenchError` (from the CLI: exit 2, one `error:` line or
one over indented problem lines), never another exception, and within a per-example time
limit: 0 tracebacks, 0 hangs. The example counts are bounded and the draws derandomized, so
the file runs in well under a minute and a failure reproduces."""

import contextlib
import io
import signal
from collections.abc import Iterator

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fgl_workbench.errors import WorkbenchError
from fgl_workbench.interface.cli import main
from fgl_workbench.running.suite import MAX_CELLS, expand, load_suite

LIMIT_S = 10  # per example: every refusal is checked before anything grows
FUZZ = settings(
    max_examples=150,
    deadline=None,  # the alarm below stops a hang; timing on a shared machine varies
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=True,  # the same inputs every run: a failure reproduces
)

VALID = {
    "name": "fuzz",
    "seeds": [0, 1],
    "datasets": [{"name": "csbm", "params": {"num_nodes": 200}}],
    "partitions": [{"method": "metis", "num_clients": 2}],
    "targets": [
        {
            "name": "fedavg",
            "params": {"rounds": 1},
            "defenses": [{"name": "dp-fedavg", "params": {"noise_multiplier": 1.0}}],
            "sweep": {"params.rounds": [1, 2]},
        }
    ],
    "attacks": [{"name": "mia-threshold", "params": {"signal": "loss"}}],
}


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Fails the example, instead of the whole run hanging, when it takes too long."""

    def expire(*_):
        raise TimeoutError(f"no answer within {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["csbm", "metis", "fedavg", "dp-fedavg", "mia-threshold", "public", ""]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
KEYS = sorted({k for k in VALID} | {"params", "name", "sweep", "defenses", "split", "audit"})


def paths(node, prefix=()):
    """Every place in the valid suite a mutation can land."""
    yield prefix
    if isinstance(node, dict | list):
        for k, v in node.items() if isinstance(node, dict) else enumerate(node):
            yield from paths(v, (*prefix, k))


PLACES = list(paths(VALID))


@st.composite
def mutated_suites(draw):
    """The valid suite with a few places replaced, removed or given an extra key."""
    suite = yaml.safe_load(yaml.safe_dump(VALID))
    for _ in range(draw(st.integers(1, 3))):
        place = draw(st.sampled_from(PLACES[1:]))
        parent = suite
        try:
            for step in place[:-1]:
                parent = parent[step]
            action = draw(st.sampled_from(["replace", "remove", "extra"]))
            if action == "replace":
                parent[place[-1]] = draw(values)
            elif action == "remove" and isinstance(parent, dict):
                parent.pop(place[-1], None)
            elif isinstance(parent, dict):
                parent[draw(st.sampled_from(KEYS))] = draw(values)
        except (KeyError, IndexError, TypeError):  # an earlier mutation moved it away
            continue
    return suite


def parse_file(tmp_path, text: str) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text(text)
    with time_limit(LIMIT_S):
        try:
            suite = load_suite(path)
        except WorkbenchError as exc:
            assert str(exc).strip(), "an error with no message"
            return
        assert len(expand(suite)) <= MAX_CELLS


@FUZZ
@given(suite=mutated_suites())
def test_mutated_suites_parse_or_fail_with_a_workbench_error(tmp_path, suite):
    parse_file(tmp_path, yaml.safe_dump(suite))


def hostile() -> dict[str, str]:
    """Suites the issue's fuzzing found hanging: too many seeds, a million-cell grid, an
    alias bomb; and a deep nesting."""
    grid = {**VALID, "seeds": list(range(1000))}
    grid["targets"] = [{"name": "fedavg", "sweep": {"params.rounds": list(range(1, 1001))}}]
    bomb = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    bomb += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 6)]
    return {
        "seeds.yaml": yaml.safe_dump({**VALID, "seeds": list(range(200_000))}),
        "grid.yaml": yaml.safe_dump(grid),
        "bomb.yaml": "\n".join(
            [*bomb, *yaml.safe_dump({**VALID, "name": "b"}).splitlines()]
        ).replace("params:\n    signal: loss", "params:\n    signal: [*a5]"),
        "deep.yaml": "name: " + "[" * 3000 + "]" * 3000,
    }


HOSTILE = hostile()


@FUZZ
@given(
    text=st.one_of(
        st.text(max_size=200),
        st.builds(yaml.safe_dump, values),
        st.sampled_from([*HOSTILE.values()]),
    )
)
def test_any_text_as_a_suite_fails_with_a_workbench_error(tmp_path, text):
    parse_file(tmp_path, text)


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    """Paths a fuzzed argument may name: missing, a file, an empty folder, bad suites."""
    root = tmp_path_factory.mktemp("fuzz")
    (root / "empty").mkdir()
    (root / "file.txt").write_text("not a suite: [")
    (root / "binary.yaml").write_bytes(bytes(range(256)))
    (root / "list.yaml").write_text("- 1\n- 2\n")
    for name, text in HOSTILE.items():
        (root / name).write_text(text)
    names = ["missing", "file.txt", "empty", "binary.yaml", "list.yaml", *HOSTILE]
    return [str(root / n) for n in names]


FLAGS = {
    "run": [
        "--out",
        "--data-root",
        "--jobs",
        "--executor",
        "--address",
        "--device",
        "--dry-run",
        "--quiet",
        "--mlflow-experiment",
    ],
    "audit": ["--out", "--canaries", "--jobs", "--device", "--quiet"],
    "report": ["--out", "--tradeoff-png"],
    "attack": ["--attack", "--params", "--jobs", "--device", "--data-root"],
    "export": ["--format", "--output"],
    "list": ["--import"],
    "epsilon": [
        "--mechanism",
        "--sigma",
        "--q",
        "--steps",
        "--sensitivity",
        "--count",
        "--b",
        "--sigma0",
        "--releases",
        "--rho",
        "--delta",
        "--target-epsilon",
        "--solve",
        "--orders",
        "--conversion",
        "--grid",
        "--json",
        "--run",
        "--no-refine",
    ],
}
WORDS = st.one_of(
    st.sampled_from(
        [
            "1",
            "0",
            "-1",
            "1e300",
            "nan",
            "0.5",
            "1,2",
            "1:3:1",
            "0:1e9:1e-9",
            "gaussian",
            "laplace",
            "subsampled-gaussian",
            "metric-gaussian",
            "ray",
            "serial",
            "cuda:7",
            "cpu",
            "csv",
            "parquet",
            "{}",
            "[",
            "targets",
            "",
            "-",
        ]
    ),
    st.text(
        alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
        max_size=12,
    ),
)


@st.composite
def command_lines(draw, places):
    verb = draw(st.sampled_from(sorted(FLAGS)))
    argv = [verb]
    if verb in ("run", "audit", "report", "attack", "export"):
        argv.append(draw(st.sampled_from(places)))
    for _ in range(draw(st.integers(0, 4))):
        argv.append(draw(st.sampled_from(FLAGS[verb])))
        argv.append(draw(st.one_of(WORDS, st.sampled_from(places))))
    if verb == "run" and "--out" not in argv:
        argv += ["--out", places[0]]
    return argv


@settings(FUZZ, max_examples=300)
@given(data=st.data())
def test_every_verb_with_fuzzed_arguments_ends_in_one_line(places, tmp_path, monkeypatch, data):
    monkeypatch.chdir(tmp_path)  # epsilon grids write beside the current folder
    argv = data.draw(command_lines(places))
    err = io.StringIO()
    with (
        time_limit(LIMIT_S),
        contextlib.redirect_stderr(err),
        contextlib.redirect_stdout(io.StringIO()),
    ):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's usage error (or --help)
            code = exc.code
    assert code in (0, 2), (argv, code, err.getvalue())
    assert "Traceback" not in err.getvalue(), (argv, err.getvalue())
    if code == 2 and err.getvalue().startswith("error:"):
        # one line, or a headline over indented lines, one per problem (invalid suites)
        lines = err.getvalue().splitlines()
        assert all(line.startswith("  ") for line in lines[1:]), (argv, err.getvalue())
