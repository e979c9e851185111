"""The manual's GPU examples: ```python cuda blocks on a GPU or numba's CUDA simulator, ```python cupy blocks
on a GPU with CuPy."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docblocks import Block, blocks, run
from tests.gpu.test_corpus_cuda import SIMULATED, _gpu_available

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not _gpu_available(), reason="no GPU and NUMBA_ENABLE_CUDASIM is not 1")
@pytest.mark.parametrize("block", blocks("cuda"), ids=lambda b: b.name)
def test_cuda_example_runs(block: Block, tmp_path: Path) -> None:
    run(block, tmp_path)


@pytest.mark.skipif(SIMULATED or not _gpu_available(), reason="needs a GPU with CuPy")
@pytest.mark.parametrize("block", blocks("cupy"), ids=lambda b: b.name)
def test_cupy_example_runs(block: Block, tmp_path: Path) -> None:
    run(block, tmp_path)
