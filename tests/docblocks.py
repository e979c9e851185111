"""The ```python blocks of README.md and docs/*.md, for the tests that run them.

A block's info string says where it runs: ```python (plain, serial), ```python mpi (under mpiexec, in
tests/mpi), ```python cuda (numba device arrays: a GPU or numba's CUDA simulator, in tests/gpu), ```python cupy
(CuPy on a real GPU). A ```text output block right after a python block is what the block must print.
Each block is a whole program: it runs alone, from the repository root.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import runpy
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(
    r"^```python(?P<tag>[^\n]*)\n(?P<code>.*?)^```\n(?:\s*prints\s*)?(?:\s*^```text output\n(?P<output>.*?)^```\n)?",
    re.M | re.S,
)


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    tag: str
    code: str
    output: str | None

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(tag: str) -> list[Block]:
    """The python blocks of every page with info string ``python`` + ``tag`` (``""``: plain)."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for m in BLOCK.finditer(text):
            if m["tag"].strip() == tag:
                line = text.count("\n", 0, m.start()) + 1
                found.append(Block(str(page.relative_to(ROOT)), line, tag, m["code"], m["output"]))
    return found


def run(block: Block, tmp: Path) -> None:
    """Run ``block`` as a script file (pad reads kernels' source from files) and check what it prints."""
    script = tmp / (re.sub(r"\W", "_", block.name) + ".py")
    script.write_text(block.code)
    printed = io.StringIO()
    here = Path.cwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(printed):
            runpy.run_path(str(script), run_name="__main__")
    finally:
        os.chdir(here)
    if block.output is not None:
        assert printed.getvalue().strip() == block.output.strip(), (
            f"{block.name} printed\n{printed.getvalue()}\nbut the page says\n{block.output}"
        )
