"""``pad.precompile`` under MPI: the ranks share the compiling through one cache directory, then every rank
loads every launcher from it."""

from __future__ import annotations

import numpy as np
import pytest
from numba.core import event

import pad


@pad.kernel
def k_shift(i, a, x, y):
    y[i] = x[i] + a


@pad.kernel
def k_cube(i, x, y):
    y[i] += x[i] * x[i] * x[i]


def program(x, y):
    pad.launch(k_shift, x.shape[0], 1.0, x, y)
    pad.launch(k_cube, x.shape[0], x, y)


@pytest.mark.mpi
def test_ranks_share_the_compiling_and_all_load_it(comm, everywhere, tmp_path_factory, monkeypatch):
    cache = comm.mpi.bcast(str(tmp_path_factory.mktemp("cache")) if comm.rank == 0 else None)
    monkeypatch.setenv("PAD_CACHE_DIR", cache)
    x, y = np.arange(5.0), np.zeros(5)
    done = pad.precompile(program, x, y, comm=comm, workers=0)
    each_once = comm.mpi.allreduce(done["compiled"]) == done["launchers"] == 2  # a launcher per kernel
    with event.install_recorder("numba:compile") as recorder:
        program(x, y)
    compiled = [e.data["dispatcher"].py_func.__name__ for e in recorder.buffer if e.is_start]
    assert everywhere(each_once and not [n for n in compiled if n.startswith("k_")]), (done, compiled)
    assert everywhere(y.tolist() == [1.0, 3.0, 11.0, 31.0, 69.0])
