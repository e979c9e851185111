"""``pad.precompile``: compile the launchers a program will need before it runs them, in parallel.

numba compiles a launcher on its first call, one at a time and holding the GIL: LULESH's per-cycle gradient,
two dozen launchers, took minutes before its first timed cycle (docs/benchmarks.md, "In the code"). ``pad.precompile(fn, *args)`` runs
``fn(*args)`` once with its launches noted and not run, then compiles every noted launcher and the
inspectors of those run by a plan, for the argument types they were called with, in parallel processes into
numba's on-disk cache beside pad's generated files (``PAD_CACHE_DIR``). The program's own first calls then
load them from the cache.

``fn`` is a warm-up: a run of a few steps whose Python control flow does not depend on what the launches
compute (they do not run: its arrays keep their values, and adjoints add nothing). Under MPI, ``comm`` shares
the compiling among its ranks, which wait for each other at the end: all must see one cache directory (on a
shared file system across nodes; where a rank does not, it compiles what it misses on first use, as without
``precompile``). A launcher compiled by an earlier run is not compiled again.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

from pad.kernel import compiler

__all__ = ["precompile"]


def precompile(
    fn: Callable[..., Any], *args: Any, comm: Any = None, workers: int | None = None
) -> dict[str, Any]:
    """Compile, ahead and in parallel, the launchers ``fn(*args)`` launches (see the module's docstring).

    ``comm``: an mpi4py or ``pad.mpi`` communicator whose ranks share the work (every rank calls
    ``precompile``). ``workers``: processes to start besides this one (default: the cores this process may
    use, shared among its node's ranks, less one). Returns what it did: ``launchers`` noted (the functions:
    launchers and inspectors), ``compiled`` by this process and its ``workers``, in ``seconds``, with
    ``cpu_s`` of this process and ``workers_cpu_s`` of the others (on an idle machine the seconds are about
    the larger of ``cpu_s`` and ``workers_cpu_s / workers``: numba compiles on one core).
    """
    from numba import config

    start, times = time.perf_counter(), os.times()
    if config.ENABLE_CUDASIM:  # type: ignore[attr-defined]  # the simulator has no compiler to keep busy
        return {
            "launchers": 0,
            "compiled": 0,
            "workers": 0,
            "seconds": 0.0,
            "cpu_s": 0.0,
            "workers_cpu_s": 0.0,
        }
    with compiler.Noting() as noted:
        fn(*args)
    items = compiler.ahead_items(noted.items)
    mpi = getattr(comm, "mpi", comm)
    rank, size = (mpi.Get_rank(), mpi.Get_size()) if mpi is not None else (0, 1)
    if workers is None:
        workers = max(0, _cores() // _node_ranks(mpi) - 1)
    compiled = compiler.compile_ahead(items, workers, (rank, size))
    if size > 1:
        mpi.Barrier()
    end = os.times()
    return {
        "launchers": len(items),
        "compiled": compiled,
        "workers": workers,
        "seconds": time.perf_counter() - start,
        "cpu_s": end.user + end.system - times.user - times.system,
        "workers_cpu_s": end.children_user
        + end.children_system
        - times.children_user
        - times.children_system,
    }


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _node_ranks(mpi: Any) -> int:
    if mpi is None or mpi.Get_size() == 1:
        return 1
    shared = sys.modules["mpi4py.MPI"].COMM_TYPE_SHARED
    node = mpi.Split_type(shared)
    try:
        return int(node.Get_size())
    finally:
        node.Free()
