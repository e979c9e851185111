"""The manual's MPI examples (```python mpi blocks) run on every rank count the MPI tests use."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.docblocks import Block, blocks, run

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("block", blocks("mpi"), ids=lambda b: b.name)
def test_mpi_example_runs(block: Block, everywhere: Callable[[bool], bool]) -> None:
    error = None
    try:
        with tempfile.TemporaryDirectory() as tmp:  # not tmp_path: the ranks would race to clean it
            run(block, Path(tmp))
    except Exception as exc:
        error = exc
    assert everywhere(error is None), f"failed on some rank; here: {error!r}"
