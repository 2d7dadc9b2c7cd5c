"""notebooks/ are committed without outputs (issue 18).

An output is what one run against one router printed: committed, it would go stale and
read as if it were what the reader's router answers. `make test` executes every notebook
(tests/integration/test_notebooks.py), so this only checks what is committed.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[3]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXECUTED_BY = ROOT / "tests" / "integration" / "test_notebooks.py"


def test_the_walkthroughs_exist_and_each_is_executed_in_make_test() -> None:
    names = {path.name for path in NOTEBOOKS}
    assert {"quickstart.ipynb", "routing-quality.ipynb", "cluster-and-scaling.ipynb"} <= names
    executed = EXECUTED_BY.read_text()
    assert not [name for name in names if f'"{name}"' not in executed], "a notebook no test runs"
    readme = (ROOT / "notebooks" / "README.md").read_text()
    assert not [name for name in names if name not in readme], "a notebook notebooks/README.md does not name"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_committed_without_outputs_or_execution_counts(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    dirty = [
        index
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code"
        and (cell.outputs or cell.execution_count is not None or "execution" in cell.metadata)
    ]
    assert not dirty, (
        f"{path.name}: cells {dirty} carry outputs or execution counts; clear them before committing "
        "(notebooks/README.md says how)"
    )
    assert notebook.metadata.get("kernelspec", {}).get("name") == "python3"
