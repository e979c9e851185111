"""Fixtures for the MPI tests (run under ``mpiexec -n N python -m pytest --with-mpi -m mpi tests/mpi``)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import pad.mpi


@pytest.fixture
def comm() -> pad.mpi.Comm:
    return pad.mpi.COMM_WORLD


@pytest.fixture
def rng(comm: pad.mpi.Comm) -> np.random.Generator:
    """Different values on every rank (so MIN/MAX have one winner), the same from run to run."""
    return np.random.default_rng(1000 + comm.rank)


@pytest.fixture
def everywhere(comm: pad.mpi.Comm) -> Callable[[bool], bool]:
    """``everywhere(cond)``: whether ``cond`` holds on every rank (assert it, so all ranks agree)."""
    return lambda cond: bool(comm.mpi.allreduce(bool(cond), op=pad.mpi.MIN))
