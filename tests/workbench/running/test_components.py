"""`fgl-workbench list` and `epsilon` answer without importing the heavy stack, and the table
`list` prints from is what the registries hold."""

import subprocess
import sys

import pytest

from fgl_workbench.running.components import KINDS, listing


@pytest.mark.parametrize("kind", KINDS)
def test_the_listed_built_ins_are_the_registered_ones(kind):
    declared = [line for line in listing(kind) if "plug-in, not imported" not in line]
    # plug-ins adopted by earlier tests of this session (by entry point or a suite's
    # module reference) are not built in
    adopted = ("entry point", "module reference")
    registered = [
        line for line in listing(kind, imported=True) if not any(a in line for a in adopted)
    ]
    assert declared == registered


def test_list_and_epsilon_import_neither_torch_nor_scikit_learn():
    code = (
        "import sys\n"
        "from fgl_workbench.interface.cli import main\n"
        "assert main(['list']) == 0\n"
        "assert main(['epsilon', '--mechanism', 'subsampled-gaussian', '--sigma', '1', "
        "'--q', '0.01', '--steps', '100']) == 0\n"
        "heavy = ('torch', 'sklearn', 'torch_geometric', 'mlflow')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "mia-lira (adversary: querier, server) [built-in]" in out
    assert "epsilon = " in out
    assert out.strip().splitlines()[-1] == "[]"
