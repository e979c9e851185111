"""The manual keeps true: its plain examples run and print what the pages say, every page has an example,
and the results tables are the ones ``scripts/results.py`` renders from ``docs/results/``."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docblocks import BLOCK, PAGES, ROOT, Block, blocks, run


@pytest.mark.parametrize("block", blocks(""), ids=lambda b: b.name)
def test_example_runs(block: Block, tmp_path: Path) -> None:
    run(block, tmp_path)


def test_every_page_has_an_example() -> None:
    bare = [str(page.relative_to(ROOT)) for page in PAGES if not BLOCK.search(page.read_text())]
    assert not bare, f"pages without a python example: {bare}"


def test_results_tables_are_rendered_from_their_files() -> None:
    check = subprocess.run(
        [sys.executable, "scripts/results.py", "render", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr + "run: python scripts/results.py render"


def test_record_keeps_where_and_when_a_result_came_from(tmp_path: Path) -> None:
    write = "import json, sys; json.dump({'ratio': 2.5}, open(sys.argv[sys.argv.index('--json') + 1], 'w'))"
    out = tmp_path / "r.json"
    record = [sys.executable, "scripts/results.py", "record", str(out), "--machine", "test box", "--"]
    subprocess.run(
        [*record, sys.executable, "-c", write],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    rec = json.loads(out.read_text())
    assert rec["result"] == {"ratio": 2.5}
    assert rec["machine"].startswith("test box (") and rec["date"].endswith(" UTC")
    assert rec["command"].endswith("-c " + shlex.quote(write)) and len(rec["load_average"]) == 2
