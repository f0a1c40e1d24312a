"""The quickstart notebook (issue 16, item 9): examples/quickstart.ipynb executes headless (nbclient) on a kernel
from this venv, from the repository root, against a temporary store, without errors, and shows what it promises:
the accounting table, the plots as image/png, the tokens, the analogy, the n-gram query, a non-empty lm sample,
a verified artifact and a second run that computes nothing. The notebook is stored without outputs; this test
reads only the outputs of its own run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.server]

NOTEBOOK = REPO / "examples" / "quickstart.ipynb"
KERNEL = "corpusforge-quickstart-test"


def cell_text(cell) -> str:
    """The text a cell showed: its streams, results and errors (text/plain)."""
    parts = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            parts.append(out["text"])
        elif out["output_type"] in ("execute_result", "display_data"):
            parts.append(out["data"].get("text/plain", ""))
        elif out["output_type"] == "error":
            parts.append("\n".join(out["traceback"]))
    return "".join(parts)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The notebook after a headless run: a kernelspec for this interpreter (not whatever `python3` resolves
    to), cwd the repository root, CORPUSFORGE_STORE a temporary store; its local server is stopped after."""
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("ipykernel")

    base = tmp_path_factory.mktemp("quickstart")
    store = base / "store"
    spec_dir = base / "jupyter" / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "corpusforge venv", "language": "python"}), encoding="utf-8")

    mp = pytest.MonkeyPatch()
    mp.setenv("JUPYTER_PATH", str(base / "jupyter"))
    mp.setenv("CORPUSFORGE_STORE", str(store))
    mp.delenv("PREFECT_API_URL", raising=False)  # the store's own API, as a user has it
    nb = nbformat.read(NOTEBOOK, as_version=4)
    try:
        # cwd examples/: the notebook steps up to the repository root itself, as it does when Jupyter starts there
        client = nbclient.NotebookClient(nb, kernel_name=KERNEL, timeout=600, allow_errors=False,
                                         resources={"metadata": {"path": str(NOTEBOOK.parent)}})
        client.execute()
        yield nb
    finally:
        mp.undo()
        subprocess.run([str(Path(sys.executable).parent / "corpusforge"), "server", "stop", "--store", str(store)],
                       capture_output=True, timeout=120)


def tagged(nb, tag: str):
    (cell,) = [c for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]
    return cell


def test_notebook_is_stored_without_outputs():
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


def test_quickstart_runs_headless(executed):
    nb = executed
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not [o for o in cell.outputs if o["output_type"] == "error"], cell_text(cell)

    setup = cell_text(tagged(nb, "setup"))
    assert f"repository: {REPO}" in setup and "store:" in setup
    assert str(REPO / ".corpusforge") not in setup  # the test's temporary store, never the repository's own

    run = cell_text(tagged(nb, "run"))
    assert re.search(r"[1-9]\d* step\(s\) computed, 0 reused from the store", run), run  # a fresh store
    assert "lm_sample" in run and "computed" in run

    accounting = cell_text(tagged(nb, "accounting"))
    for word in ("sample/tinyshakespeare.txt", "sample/broken.jsonl", "TOTAL", "quarantined", "deduplicated"):
        assert word in accounting, accounting
    assert "7233" in accounting.replace(",", "")

    metrics = cell_text(tagged(nb, "metrics"))
    assert "val_ppl" in metrics and "valid.perplexity" in metrics and "fertility" in metrics

    plots = tagged(nb, "plots")
    images = [o for o in plots.outputs if o["output_type"] == "display_data" and "image/png" in o["data"]]
    assert len(images) == 5 and all(len(o["data"]["image/png"]) > 1000 for o in images)

    assert "'To'" in cell_text(tagged(nb, "tokenizer")) and "decodes back exactly: True" in \
        cell_text(tagged(nb, "tokenizer"))
    assert len(cell_text(tagged(nb, "vectors")).splitlines()) == 9
    assert "P(" in cell_text(tagged(nb, "ngram")) and "log10 P('I am the king')" in cell_text(tagged(nb, "ngram"))

    lm = cell_text(tagged(nb, "lm-sample")).splitlines()
    generated = next(line for line in lm if line.startswith("generated "))
    assert int(generated.split()[1]) > 0
    sample = "\n".join(lm[lm.index(generated) + 1:])
    assert sample.startswith("ROMEO:") and sample[len("ROMEO:"):].strip(), lm

    find = cell_text(tagged(nb, "find"))
    assert "show by id prefix finds it: True" in find and ": ok" in find, find
    assert "0 step(s) computed; same lm: True" in cell_text(tagged(nb, "again"))
