"""notebooks/scaling.ipynb, executed with papermill on the tiny real study (skipped without the notebook
extras, which the test extra installs)."""

from __future__ import annotations

import copy
import glob
import json
import os
import subprocess
import time

import pytest

REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
NOTEBOOK = os.path.join(REPO, "notebooks", "scaling.ipynb")


def lines(path) -> list[dict]:
    with open(path) as fh:
        return [json.loads(line) for line in fh]


def _execute_notebook(results: str, figures: str | None, tmp_path) -> list[str]:
    """Run the notebook with papermill (``figures`` None: its default); returns the text outputs of its cells."""
    for module in ("papermill", "pandas", "matplotlib", "ipykernel"):
        pytest.importorskip(module, reason='the notebook extras (pip install -e ".[notebooks]")')
    import papermill

    out = tmp_path / "executed.ipynb"
    parameters = {"results": results} | ({"figures": figures} if figures is not None else {})
    nb = papermill.execute_notebook(NOTEBOOK, str(out), parameters=parameters, progress_bar=False, cwd=REPO)
    texts = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            assert output["output_type"] != "error", output
            texts.append(output.get("text", "") + output.get("data", {}).get("text/plain", ""))
    return texts


def _png(path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(8) == b"\x89PNG\r\n\x1a\n" and os.path.getsize(path) > 10_000


def test_notebook_executes_on_the_tiny_study(tiny_study, tmp_path):
    """With its default output folder: results/figures, which git ignores; the committed figures and notebook
    stay as they are."""
    committed = {path: os.path.getmtime(path) for path in [NOTEBOOK, *glob.glob(f"{REPO}/docs/figures/*")]}
    start = time.time()
    texts = "\n".join(_execute_notebook(tiny_study, None, tmp_path))
    assert "8 runs from 1 file(s)" in texts and "no failed points" in texts and "no GPU points" in texts
    assert (
        "minibude  threads  strong  128  gradient        2" in texts
    )  # the table: one row per series and workers
    assert "minibude    ranks  strong  128  gradient        2" in texts
    figure = os.path.join(REPO, "results", "figures", "scaling-minibude.png")
    assert "saved results/figures/scaling-minibude.png" in texts and _png(figure)
    assert os.path.getmtime(figure) >= start - 1
    ignored = subprocess.run(["git", "check-ignore", "-q", figure], cwd=REPO)
    assert ignored.returncode in (0, 128)  # ignored (128: no git checkout, as on a host without .git)
    assert {path: os.path.getmtime(path) for path in committed} == committed


def test_notebook_plots_lulesh_and_gpu_series(tiny_study, tmp_path):
    """The GPU and LULESH branches, on lines derived from the tiny study (no GPU or LULESH here): 1 and 2 GPUs
    at a tenth of the CPU's times, LULESH on 1 and 8 ranks with a failed point among them."""
    runs = lines(tiny_study)
    derived = []
    for r in runs:
        if r["kind"] == "threads":
            gpu = copy.deepcopy(r)
            gpu.update(kind="gpus", ranks=r["workers"], threads=1)
            gpu["result"].update(device="gpu", time_primal_s=r["result"]["time_primal_s"] / 10)
            if gpu["result"]["time_grad_s"] is not None:
                gpu["result"]["time_grad_s"] /= 10
            derived.append(gpu)
        else:
            lulesh = copy.deepcopy(r)
            workers = 8 if r["workers"] == 2 else 1
            lulesh.update(app="lulesh", size=60, workers=workers, ranks=workers)
            lulesh["result"].update(
                app="lulesh", problem={"size": 60 // round(workers ** (1 / 3)), "elements": 216000}
            )
            derived.append(lulesh)
    failed = {**derived[-1], "ok": False, "result": None, "error": "exit status 255: VolumeError"}
    path = tmp_path / "derived.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [*runs, *derived, failed]))
    figures = tmp_path / "figures"
    texts = "\n".join(_execute_notebook(str(path), str(figures), tmp_path))
    assert "exit status 255: VolumeError" in texts and "2 GPUs" in texts and "1 thread" in texts
    names = ["gpu-minibude.png", "scaling-lulesh.png", "scaling-minibude.png"]
    assert sorted(os.listdir(figures)) == names and all(_png(figures / n) for n in names)
