"""LULESH on pad against the C++ original, side by side in one run; writes JSON.

For each case (``-s``, ``-i``) and thread count, runs pad's ``python -m apps.lulesh`` and, when given, the
C++ original (``--original BINARY``, or ``--build-original SRC`` to compile LLNL/LULESH's sources into a
scratch folder with the original's release flags, ``-O3 -fopenmp``, serial MPI-free build), alternating
them so that both see the same machine load, and reports each one's FOM (zones per millisecond; higher is
faster), the ratio pad / original and the Final Origin Energy of both. ``--device gpu`` runs pad on the GPU
too. ``--forces`` times the two ways of summing corner forces to nodes (see ``forces_study``),
``--per-cycle`` the per-cycle gradient against the primal cycle in one process (``cycle_ratio``),
``--speedup`` both cycles on every thread count in one process, the counts alternating (``thread_speedup``),
``--per-launcher`` each launcher of both cycles (``per_launcher``), ``--rows`` the rows of the replays'
compiled programs, where their threads wait (``row_profile``), and ``--launches`` what the gradient's
cycle spends outside the compiled launchers (``launch_profile``), all after ``--after`` primal cycles (the
blast's early cycles leave most of the mesh at rest, where the adjoints find zero seeds and skip their
work); ``--no-runs`` leaves out the app's runs.

    python scripts/bench_lulesh.py --build-original /path/to/LULESH --cases 30: 45:100 --threads 1 2
    python scripts/bench_lulesh.py --cases 60:100 --threads 1 2 4 8 16       # strong scaling
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any
from unittest import mock

import numpy as np

from apps import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = ("lulesh.cc", "lulesh-comm.cc", "lulesh-viz.cc", "lulesh-util.cc", "lulesh-init.cc")


def build_original(src: str, folder: str) -> str:
    """Compile the C++ original from ``src`` (a checkout of LLNL/LULESH) into ``folder``; the binary's path."""
    for name in (*SOURCES, "lulesh.h", "lulesh_tuple.h"):
        shutil.copy(os.path.join(src, name), folder)
    binary = os.path.join(folder, "lulesh2.0")
    subprocess.run(
        ["g++", "-O3", "-fopenmp", "-I.", "-DUSE_MPI=0", "-o", binary, *SOURCES, "-lm"],
        cwd=folder,
        check=True,
        capture_output=True,
    )
    return binary


def parse_report(text: str) -> dict[str, float]:
    """Iterations, energy, elapsed time and FOM from the original's end-of-run report (pad prints the same)."""
    fields = {
        "iterations": r"Iteration count\s+=\s+(\d+)",
        "final_origin_energy": r"Final Origin Energy\s+=\s+(\S+)",
        "elapsed_s": r"Elapsed time\s+=\s+(\S+)",
        "fom": r"FOM\s+=\s+(\S+)",
    }
    out = {}
    for key, pattern in fields.items():
        found = re.search(pattern, text)
        if found is None:
            raise RuntimeError(f"no {key} in the report:\n{text}")
        out[key] = float(found.group(1))
    return out


def run_original(binary: str, size: int, iterations: int | None, threads: int) -> dict[str, float]:
    argv = [binary, "-s", str(size)] + (["-i", str(iterations)] if iterations else [])
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
    return parse_report(done.stdout)


def run_pad(size: int, iterations: int | None, threads: int, device: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        argv = [
            sys.executable,
            "-m",
            "apps.lulesh",
            "-s",
            str(size),
            "--threads",
            str(threads),
            "--device",
            device,
        ]
        argv += (["-i", str(iterations)] if iterations else []) + ["--json", out]
        done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stderr}")
        with open(out) as fh:
            result: dict[str, Any] = json.load(fh)
    return result


def forces_study(size: int, threads: int, repeat: int = 20) -> dict[str, float]:
    """Seconds per call of the two race-free ways to sum the corner forces of ``size**3`` elements into
    the nodes: gathering over each node's corners (what the app does), or scattering from each element with
    pad's privatized ``+=`` (one buffer of node forces per thread, summed afterwards)."""
    import numba

    import pad
    from apps.lulesh import kernels as K
    from apps.lulesh import mesh as M

    @pad.kernel
    def scatter_forces(i, nodelist, fs, fh, f):
        for k in range(8):
            n = nodelist[k, i]
            f[0, n] += fs[0, k, i] + fh[0, k, i]
            f[1, n] += fs[1, k, i] + fh[1, k, i]
            f[2, n] += fs[2, k, i] + fh[2, k, i]

    numba.set_num_threads(threads)
    m = M.build(size, 1, 0, 11, 1, 1)
    rng = np.random.default_rng(0)
    fs, fh = rng.normal(size=(3, 8, m.nelem)), rng.normal(size=(3, 8, m.nelem))
    f = np.zeros((3, m.nnode))

    def gather() -> None:
        pad.launch(
            K.k_gather_forces, m.nnode, m.corner_start, m.corner_list, fs.reshape(3, -1), fh.reshape(3, -1),
            False, f,
        )  # fmt: skip

    def scatter() -> None:
        f[...] = 0.0
        pad.launch(scatter_forces, m.nelem, m.nodelist, fs, fh, f)

    times = {}
    for name, fn in (("gather_s", gather), ("scatter_s", scatter)):
        fn()
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - start)
        times[name] = best
    return times


def _recorded_gradient(size: int, threads: int, after: int = 0) -> tuple[Any, Any, Any]:
    """A one-rank LULESH of ``-s size`` on ``threads`` threads, its state and its per-cycle gradient step,
    after ``after`` primal cycles and three cycles of the gradient: compiled, its plans made, its replays
    recorded."""
    import numba

    import pad.mpi
    from apps.lulesh import adjoint
    from apps.lulesh import mesh as M
    from apps.lulesh.hydro import Hydro

    numba.set_num_threads(threads)
    hydro = Hydro(M.build(size, 1, 0, 11, 1, 1), pad.mpi.COMM_WORLD)
    state = hydro.initial_state()
    hydro.setup(state)
    step = adjoint.StepGradient(hydro)
    hydro.advance(state, after)
    hydro.advance(state, 3, leapfrog=step)
    return hydro, state, step


def moving_nodes(hydro: Any, state: Any) -> float:
    """The fraction of the nodes that move (a velocity component at or above U_CUT, which cuts the others to
    zero): elsewhere the adjoints' seeds are zero, and they skip those elements."""
    xv = hydro.memory.get(state.xv)
    return float(np.count_nonzero((xv[3:6] != 0.0).any(axis=0)) / xv.shape[1])


def _lap(hydro: Any, state: Any, leapfrog: Any, cycles: int, t: int) -> float:
    """Seconds per cycle of ``cycles`` cycles from cycle ``t``, each as ``Hydro.advance`` runs those after the
    first: the time increment, ``leapfrog`` (a replayed primal or differentiated step), the fault check."""
    begin = time.perf_counter()
    for k in range(cycles):
        hydro.later_increment(state)
        leapfrog(state)
        hydro.check(t + k)
    return (time.perf_counter() - begin) / cycles


def cycle_ratio(size: int, threads: int, after: int = 0, cycles: int = 5, rounds: int = 7) -> dict[str, Any]:
    """The per-cycle gradient against the primal cycle in one process, alternating: ``rounds`` times, ``cycles``
    primal cycles then ``cycles`` gradient cycles (each as ``Hydro.advance`` runs those after the first: the
    time increment, the replayed leap-frog step or the replayed differentiated one, ``StepGradient``, and the
    fault check), on one state that both advance. Wall-clock seconds per cycle, the best round and the median
    one of each; neighbouring rounds see the same machine load, which on a shared host moves the runs of
    separate processes by more than the code does."""
    from pad.parallel import driver

    hydro, state, step = _recorded_gradient(size, threads, after)
    t = after + 4
    laps: dict[str, list[float]] = {"primal": [], "gradient": []}
    for _ in range(rounds + 1):  # the first round warms the primal's replay
        for name, leapfrog in (("primal", hydro.replayed_leapfrog), ("gradient", step)):
            laps[name].append(_lap(hydro, state, leapfrog, cycles, t))
            t += cycles
    assert step.replayed.why is None and hydro.replayed_leapfrog.why is None
    best = {name: min(v[1:]) for name, v in laps.items()}
    median = {name: float(np.median(v[1:])) for name, v in laps.items()}
    return {
        "size": size,
        "threads": threads,
        "after": after,
        "driver": driver.ENABLED,
        "moving_nodes": moving_nodes(hydro, state),
        "cycles": cycles,
        "rounds": rounds,
        "primal_cycle_s": best["primal"],
        "gradient_cycle_s": best["gradient"],
        "ratio": best["gradient"] / best["primal"],
        "primal_median_s": median["primal"],
        "gradient_median_s": median["gradient"],
        "median_ratio": median["gradient"] / median["primal"],
    }


def _alternating(
    hydro: Any, state: Any, step: Any, threads: list[int], rounds: int, cycles: int, after: int
) -> Iterator[tuple[int, int, str, Any, int]]:
    """``(round, count, name, leapfrog, cycle)`` to run ``cycles`` cycles of, for ``rounds + 1`` rounds (the
    first warms them), in each the thread counts in turn (``numba.set_num_threads``) and for each count the
    primal and the gradient (``hydro``'s replayed leap-frog step and ``step``), on one state that all advance:
    the machine's drift then reaches every count alike, where separate runs of one and of 16 threads seconds
    apart may see different loads. After a switch it runs one cycle of each untimed (a launch binds itself
    anew for a count in its first cycle on it); the two then run in turn, the primal first in even rounds and
    the gradient first in odd ones, so that neither always follows the switch."""
    import numba

    modes = [("primal", hydro.replayed_leapfrog), ("gradient", step)]
    t = after + 4
    try:
        for r in range(rounds + 1):
            for n in threads:
                numba.set_num_threads(n)
                for _, leapfrog in modes:
                    _lap(hydro, state, leapfrog, 1, t)
                    t += 1
                for name, leapfrog in modes if r % 2 == 0 else modes[::-1]:
                    yield r, n, name, leapfrog, t
                    t += cycles
    finally:
        numba.set_num_threads(max(threads))


def thread_speedup(
    size: int, threads: list[int], after: int = 0, cycles: int = 5, rounds: int = 7
) -> dict[str, Any]:
    """The per-cycle primal and gradient on each of ``threads`` thread counts in one process, the counts
    alternating round by round (``_alternating``): wall-clock seconds per cycle, the best round of each, and
    each count's speed-up over the fewest threads."""
    hydro, state, step = _recorded_gradient(size, max(threads), after)
    laps: dict[tuple[int, str], list[float]] = {}
    for _, n, name, leapfrog, t in _alternating(hydro, state, step, threads, rounds, cycles, after):
        laps.setdefault((n, name), []).append(_lap(hydro, state, leapfrog, cycles, t))
    assert step.replayed.why is None and hydro.replayed_leapfrog.why is None
    best = {key: min(v[1:]) for key, v in laps.items()}
    fewest = min(threads)
    return {
        "size": size,
        "threads": threads,
        "after": after,
        "moving_nodes": moving_nodes(hydro, state),
        "cycles": cycles,
        "rounds": rounds,
        **{f"{name}_cycle_s": {str(n): best[n, name] for n in threads} for name in ("primal", "gradient")},
        **{
            f"{name}_speedup": {str(n): best[fewest, name] / best[n, name] for n in threads}
            for name in ("primal", "gradient")
        },
    }


def _row_names(program: Any) -> list[str]:
    """What each row of a replay's program runs (pad/parallel/driver.py): a launch's kernel and mode, the sum
    of a launch's private buffers, a copy or a fill and its megabytes, or nothing."""
    from pad.parallel import driver

    names = {first: f"{launch.variant.kernel} ({launch.variant.mode})" for first, launch in program.launches}
    kinds = {driver.SUM: "sum", driver.COPY: "copy", driver.FILL: "fill", driver.NOTHING: "-"}
    out = []
    for k, op in enumerate(program.table):
        if k in names:
            out.append(names[k])
        elif op[0] in (driver.COPY, driver.FILL):
            out.append(f"{kinds[op[0]]} {op[3 if op[0] == driver.COPY else 2] / 1e6:.2f} MB")
        else:
            out.append(kinds[op[0]])
    return out


def row_profile(
    size: int, threads: list[int], after: int = 0, cycles: int = 3, rounds: int = 7
) -> dict[str, Any]:
    """Where the replayed primal and gradient cycles' compiled programs spend their threads' time, row by row
    (pad/parallel/driver.py, ``PROFILE``), the thread counts alternating round by round (``_alternating``):
    per row, its span (from the end of the row before, or the first worker's entering, to
    its own end, when its first worker leaves its wait), its workers' seconds in its parts and their seconds
    waiting at its end for the others, each the median over the rounds' cycles. Waiting shows a row's
    imbalance: parts the machine slowed, or a colour's busy groups, that the other threads could not share."""
    import numba

    from pad.kernel import runtime
    from pad.parallel import driver

    ticks: Any = runtime.ticks  # numba's typing context first: mypy would want it here
    now = numba.njit(lambda: ticks())
    hydro, state, step = _recorded_gradient(size, max(threads), after)
    begin, first = time.perf_counter(), now()
    time.sleep(0.2)
    per_second = (now() - first) / (time.perf_counter() - begin)
    samples: dict[tuple[int, str], list[tuple[Any, np.ndarray]]] = {}
    try:
        for r, n, name, leapfrog, t in _alternating(hydro, state, step, threads, rounds, cycles, after):
            driver.PROFILE = []
            _lap(hydro, state, leapfrog, cycles, t)
            if r:
                samples.setdefault((n, name), []).extend(driver.PROFILE)
    finally:
        driver.PROFILE = None
    rows: dict[str, list[dict[str, Any]]] = {}
    for (n, name), runs in samples.items():
        by_row: dict[tuple[int, int], list[tuple[float, float, float]]] = {}
        programs = list({id(p): p for p, _ in runs}.values())  # each once, in the order they ran
        names = [_row_names(p) for p in programs]
        for program, stamps in runs:
            i = next(j for j, p in enumerate(programs) if p is program)
            done = stamps[:, :, 2].min(axis=0)  # the first worker to leave a row's wait: when it ended
            used = np.flatnonzero(program.table[:, 0] != driver.NOTHING)
            before = stamps[:, used[0], 0].min()
            for k in used.tolist():
                parts = float((stamps[:, k, 1] - stamps[:, k, 0]).sum())
                waiting = float((stamps[:, k, 2] - stamps[:, k, 1]).sum())
                by_row.setdefault((i, k), []).append((float(done[k] - before), parts, waiting))
                before = done[k]
        rows[f"{n}:{name}"] = [
            {
                "program": i,
                "row": int(k),
                "what": names[i][k],
                **dict(
                    zip(("span_s", "parts_s", "waiting_s"), np.median(v, axis=0) / per_second, strict=True)
                ),
            }
            for (i, k), v in by_row.items()
        ]
    return {
        "size": size,
        "threads": threads,
        "after": after,
        "cycles": cycles,
        "rounds": rounds,
        "rows": rows,
    }


def driver_study(size: int, threads: int, after: int = 0, cycles: int = 5, rounds: int = 9) -> dict[str, Any]:
    """The per-cycle primal and gradient with the replays' compiled driver (pad/parallel/driver.py) and
    without it, in one process: two LULESHs recorded one way each, advanced alternately, ``rounds`` times
    ``cycles`` primal then ``cycles`` gradient cycles each (the first round warms them). Wall-clock seconds
    per cycle, best and median rounds."""
    from pad.parallel import driver

    runs, before = {}, driver.ENABLED
    for on in (True, False):
        driver.ENABLED = on  # read when a record is first replayed
        hydro, state, step = _recorded_gradient(size, threads, after)
        for _ in range(2):  # the primal step recorded, then replayed once
            hydro.later_increment(state)
            hydro.replayed_leapfrog(state)
        runs["driver" if on else "no_driver"] = (hydro, state, step)
    driver.ENABLED = before
    laps: dict[tuple[str, str], list[float]] = {}
    t = after + 5
    for _ in range(rounds + 1):
        for name, (hydro, state, step) in runs.items():
            for what, leapfrog in (("primal", hydro.replayed_leapfrog), ("gradient", step)):
                laps.setdefault((name, what), []).append(_lap(hydro, state, leapfrog, cycles, t))
                t += cycles
    result: dict[str, Any] = {
        "size": size,
        "threads": threads,
        "after": after,
        "cycles": cycles,
        "rounds": rounds,
    }
    for name in runs:
        best = {what: min(laps[(name, what)][1:]) for what in ("primal", "gradient")}
        median = {what: float(np.median(laps[(name, what)][1:])) for what in ("primal", "gradient")}
        hydro, _, step = runs[name]
        records = [*step.replayed._records.values(), *hydro.replayed_leapfrog._records.values()]
        result[name] = {
            "programs": sum(
                isinstance(e, driver.Program) for r in records for run in r._runs for e in run.entries
            ),
            "primal_cycle_s": best["primal"],
            "gradient_cycle_s": best["gradient"],
            "ratio": best["gradient"] / best["primal"],
            "primal_median_s": median["primal"],
            "gradient_median_s": median["gradient"],
        }
    return result


def _variants() -> list[Any]:
    """The compiled variants of LULESH's kernels and of the gradient's seeds copy, each with its launcher."""
    from apps.lulesh import adjoint
    from apps.lulesh import kernels as K

    return [v for k in [*vars(K).values(), adjoint.k_copy] for v in getattr(k, "_variants", {}).values()]


def _timed(
    fn: Any, spent: dict[str, list[float]], key: str, clock: Any = time.perf_counter, calls: Any = None
) -> Any:
    """``fn``, adding to ``spent[key]`` (calls, seconds) each call's count (``calls(*args)``, else 1) and
    its ``clock`` seconds."""

    def run(*args: Any) -> Any:
        begin = clock()
        try:
            return fn(*args)
        finally:
            entry = spent.setdefault(key, [0, 0.0])
            entry[0] += 1 if calls is None else calls(*args)
            entry[1] += clock() - begin

    return run


def launch_profile(
    size: int, threads: int, after: int = 0, cycles: int = 5, rounds: int = 3
) -> dict[str, Any]:
    """Where a per-cycle gradient's time goes outside the compiled launchers, as the calling thread's CPU
    time (other work on the machine does not count there), the best of ``rounds`` runs of ``cycles`` cycles.

    The cycles run as ``Hydro.advance`` runs those after the first: the time increment and the
    differentiated leap-frog step (``StepGradient``) replayed (``pad.graph``). The compiled work is wrapped by
    a timer: each launcher (numba's dispatch included) and, where the replay's driver runs consecutive
    launches, copies and fills as one program (pad/parallel/driver.py), each program; so are the plans'
    validations (index arrays compared with their copies) and, where entries run from Python (the driver
    off), the work on arrays between launches by kind: the sums of private buffers, the tape's zeroed
    shadows and its copies of kept values. What is left is Python: the replays' loops, the launches'
    arguments, buffers and plan look-ups, the graph's argument check, the fault check. (A profiler would not
    tell these apart: on Python 3.12 cProfile does not see numba's compiled functions, and counts their
    time in their Python callers.)"""
    import pad
    from pad import arrays
    from pad.parallel import cpu, driver, plans

    spent: dict[str, list[float]] = {}  # what -> [calls, CPU seconds]

    def timing(owner: Any, name: str, what: str, calls: Any = None) -> Any:
        """``owner.name`` timed as ``what`` in the calling thread's CPU time, until the profile ends."""
        fn = getattr(owner, name)
        return mock.patch.object(owner, name, _timed(fn, spent, what, time.thread_time, calls))

    def launches_in(table: np.ndarray, *_: Any) -> int:
        return int((table[:, 0] == driver.LAUNCH).sum())

    with contextlib.ExitStack() as patched:
        # before the step is recorded: a replay calls what the record bound then (the driver drives only
        # arrays.assign and arrays.zero themselves: wrapped, the copies and fills would run from Python)
        if not driver.ENABLED:
            patched.enter_context(timing(arrays, "zero", "tape: zeroed shadows"))
            patched.enter_context(timing(arrays, "assign", "tape: copies of kept values"))
        patched.enter_context(timing(plans, "_same", "plans: validations"))
        patched.enter_context(timing(cpu, "_reduce", "private buffers' sums"))
        patched.enter_context(timing(driver, "_drive", "launchers", launches_in))
        hydro, state, step = _recorded_gradient(size, threads, after)
        for variant in _variants():
            patched.enter_context(timing(variant, "launcher", "launchers"))

        def cycle(t: int) -> None:
            hydro.later_increment(state)
            step(state)
            hydro.check(t)

        t = after + 4
        best: dict[str, Any] | None = None
        for _ in range(rounds):
            spent.clear()
            begin, cpu_begin = time.perf_counter(), time.thread_time()
            for _ in range(cycles):
                cycle(t)
                t += 1
            total = (time.thread_time() - cpu_begin) / cycles
            wall = (time.perf_counter() - begin) / cycles
            calls, launchers = (v / cycles for v in spent.pop("launchers"))
            kinds = {k: s / cycles for k, (_, s) in spent.items()}
            outside = total - launchers
            kinds = {"Python": outside - sum(kinds.values()), **kinds}
            row = {
                "size": size,
                "threads": threads,
                "after": after,
                "driver": driver.ENABLED,
                "cycle_s": wall,
                "cycle_cpu_s": total,
                "launchers_cpu_s": launchers,  # and the driver's programs
                "launcher_calls": calls,  # launches, from Python or in programs
                "outside_s": outside,  # the calling thread's CPU time outside the launchers and programs
                "outside_fraction": outside / total,
                "outside_us_per_call": outside / calls * 1e6,
                "outside_by_kind_s": dict(sorted(kinds.items(), key=lambda kv: -kv[1])),
                "validations_per_cycle": spent.get("plans: validations", [0])[0] / cycles,
            }
            if best is None or row["outside_s"] < best["outside_s"]:
                best = row
    assert best is not None and step.replayed.why is None and hydro.later_increment.why is None
    return best | {"plans": pad.launch_stats()["kernels"]}


def per_launcher(size: int, threads: int, after: int = 0, cycles: int = 5, rounds: int = 3) -> dict[str, Any]:
    """Each launcher's wall time per cycle in the replayed primal and gradient cycles, and the cycles' own, the
    best of ``rounds`` runs of ``cycles`` cycles: where the gradient's time goes and, over thread counts,
    which launches scale. The replays' driver is off here, so that each launch runs from Python and is timed
    alone (numba's dispatch included); the cycles run as ``_lap`` runs them."""
    from pad.parallel import driver

    spent: dict[str, list[float]] = {}  # launcher -> [calls, seconds]
    with contextlib.ExitStack() as patched:
        patched.enter_context(mock.patch.object(driver, "ENABLED", False))  # before the steps are recorded
        hydro, state, step = _recorded_gradient(size, threads, after)
        for variant in _variants():
            timed = _timed(variant.launcher, spent, f"{variant.kernel} ({variant.mode})")
            patched.enter_context(mock.patch.object(variant, "launcher", timed))
        row: dict[str, Any] = {
            "size": size,
            "threads": threads,
            "after": after,
            "cycles": cycles,
            "rounds": rounds,
        }
        t = after + 4
        for name, leapfrog in (("primal", hydro.replayed_leapfrog), ("gradient", step)):
            best: tuple[float, dict[str, float]] | None = None
            for _ in range(rounds):
                spent.clear()
                cycle = _lap(hydro, state, leapfrog, cycles, t)
                t += cycles
                if best is None or cycle < best[0]:
                    seconds = sorted(((k, v[1] / cycles) for k, v in spent.items()), key=lambda kv: -kv[1])
                    best = (cycle, dict(seconds))
            assert best is not None
            row[f"{name}_cycle_s"], row[f"{name}_launchers_s"] = best
    return row


def case(text: str) -> tuple[int, int | None]:
    size, _, iterations = text.partition(":")
    return int(size), int(iterations) if iterations else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--cases",
        nargs="+",
        type=case,
        default=[(30, None), (45, 100)],
        help="SIZE:ITERATIONS (none: to the end)",
    )
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--device", nargs="+", choices=("cpu", "gpu"), default=["cpu"])
    p.add_argument("--original", metavar="BINARY", help="the C++ original's binary")
    p.add_argument("--build-original", metavar="SRC", help="build the C++ original from this source folder")
    p.add_argument(
        "--rounds", type=int, default=1, help="alternate pad and the original this many times; keep the best"
    )
    p.add_argument("--forces", action="store_true", help="also time gathering vs scattering corner forces")
    p.add_argument(
        "--launches",
        action="store_true",
        help="also profile the per-cycle gradient's time outside the compiled launchers (per case and thread count)",
    )
    p.add_argument(
        "--no-runs", action="store_true", help="skip the app's runs: only the studies asked for below"
    )
    p.add_argument(
        "--per-cycle",
        action="store_true",
        help="also time the per-cycle gradient against the primal cycle in one process, alternating "
        "(per case and thread count)",
    )
    p.add_argument(
        "--after",
        type=int,
        default=0,
        metavar="CYCLES",
        help="--per-cycle, --speedup, --rows, --per-launcher and --launches start after this many primal cycles "
        "(default 0)",
    )
    p.add_argument(
        "--speedup",
        action="store_true",
        help="also time the per-cycle primal and gradient on every --threads count in one process, "
        "the counts alternating round by round (per case)",
    )
    p.add_argument(
        "--rows",
        action="store_true",
        help="also profile the replayed cycles' compiled programs row by row on every --threads count in one "
        "process: each row's span, its threads' time in its parts and waiting at its end (per case)",
    )
    p.add_argument(
        "--per-launcher",
        action="store_true",
        help="also time each launcher of the per-cycle primal and gradient, each launch from Python "
        "(per case and thread count)",
    )
    p.add_argument(
        "--driver-study",
        action="store_true",
        help="also time the per-cycle primal and gradient with the replays' driver and without, in one process",
    )
    p.add_argument(
        "--no-driver",
        action="store_true",
        help="--per-cycle and --launches with each replayed entry run from Python (pad/parallel/driver.py)",
    )
    p.add_argument(
        "--json",
        "--out",
        dest="json",
        default=os.path.join(ROOT, "results", "bench_lulesh.json"),
        help="where the JSON goes",
    )
    args = p.parse_args()
    if args.no_driver:
        from pad.parallel import driver

        driver.ENABLED = False
    scratch = tempfile.mkdtemp(prefix="lulesh-original-")
    original = args.original or (
        build_original(args.build_original, scratch) if args.build_original else None
    )
    rows = []
    for size, iterations in [] if args.no_runs else args.cases:
        for device in args.device:
            for threads in args.threads if device == "cpu" else [1]:
                best_pad: dict[str, Any] = {}
                best_cpp: dict[str, float] = {}
                for _ in range(args.rounds):
                    mine = run_pad(size, iterations, threads, device)
                    if not best_pad or mine["fom"] > best_pad["fom"]:
                        best_pad = mine
                    if original and device == "cpu":
                        theirs = run_original(original, size, iterations, threads)
                        if not best_cpp or theirs["fom"] > best_cpp["fom"]:
                            best_cpp = theirs
                row = {
                    "size": size,
                    "iterations": best_pad["iterations"],
                    "device": device,
                    "threads": threads,
                    "pad_fom": best_pad["fom"],
                    "pad_elapsed_s": best_pad["elapsed_s"],
                    "pad_energy": best_pad["final_origin_energy"],
                    "pad_valid": best_pad["valid"],
                }
                if best_cpp:
                    row |= {
                        "original_fom": best_cpp["fom"],
                        "original_elapsed_s": best_cpp["elapsed_s"],
                        "original_energy": best_cpp["final_origin_energy"],
                        "fom_ratio": best_pad["fom"] / best_cpp["fom"],
                    }
                rows.append(row)
                print(json.dumps(row), flush=True)
    result: dict[str, Any] = {"machine": cli.machine(), "rows": rows}
    for size, _ in args.cases if args.forces else []:
        for threads in args.threads:
            study = {"size": size, "threads": threads} | forces_study(size, threads)
            result.setdefault("forces", []).append(study)
            print(json.dumps(study), flush=True)
    for size, _ in args.cases if args.speedup else []:
        study = thread_speedup(size, args.threads, args.after)
        result.setdefault("speedup", []).append(study)
        print(json.dumps(study), flush=True)
    for size, _ in args.cases if args.rows else []:
        study = row_profile(size, args.threads, args.after)
        result.setdefault("row_profile", []).append(study)
        for key, profile in study["rows"].items():
            for row in profile:
                print(key, json.dumps(row), flush=True)
    per_threads = [  # asked, the result's key, the study of one case on one thread count
        (args.per_cycle, "per_cycle", cycle_ratio),
        (args.per_launcher, "per_launcher", per_launcher),
        (args.driver_study, "driver", driver_study),
        (args.launches, "launches", launch_profile),
    ]
    for asked, key, study_of in per_threads:
        for size, _ in args.cases if asked else []:
            for threads in args.threads:
                study = study_of(size, threads, args.after)
                result.setdefault(key, []).append(study)
                print(json.dumps({k: v for k, v in study.items() if k != "plans"}), flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as fh:
        json.dump(result, fh, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
