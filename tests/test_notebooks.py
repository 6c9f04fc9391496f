"""The notebooks run top to bottom against the installed package (executed with nbclient).

The kernel is the interpreter running the tests (a kernelspec written to a temporary folder points
at `sys.executable`), so a fresh virtualenv needs only ipykernel, not a registered kernel."""
import json
import sys
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


@pytest.fixture(scope="module")
def kernel_manager_factory(tmp_path_factory):
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    d = tmp_path_factory.mktemp("kernels") / "parasim-test"
    d.mkdir()
    (d / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "parasim tests", "language": "python"}))

    def make():
        ksm = KernelSpecManager(kernel_dirs=[str(d.parent)], ensure_native_kernel=False)
        return KernelManager(kernel_name="parasim-test", kernel_spec_manager=ksm)
    return make


def test_notebooks_exist():
    names = {p.name for p in NOTEBOOKS}
    assert {"walkthrough.ipynb", "which_parallelism.ipynb"} <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes_without_errors(path, kernel_manager_factory):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, km=kernel_manager_factory(), timeout=240,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError naming the cell on any error
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors


def test_notebooks_define_no_formulas():
    """Notebooks import parasim; they define no functions of their own except thin helpers."""
    import nbformat

    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        src = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        assert "import simulator" in src or "from simulator" in src
        for banned in ("6 *", "* 6", "2**30 *", "peak_flops"):
            assert banned not in src, (path.name, banned)
