"""examples/audit_your_model.ipynb runs top to bottom in a fresh kernel, as a user would run
it: a GCN and a GIN trained with plain PyG, audited in three lines, the report shown inline."""

import re
from pathlib import Path

import nbclient
import nbformat

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "audit_your_model.ipynb"


def test_the_audit_notebook_runs_and_shows_its_figures(tmp_path, data_root):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on any error
    printed = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
    )
    assert len(re.findall(r"^audit of ", printed, re.M)) == 2 and "LiRA by degree" in printed
    assert "mia-lira(num_references=4)" in printed and "[" in printed  # figures with intervals
    assert (tmp_path / "audit.html").is_file()
