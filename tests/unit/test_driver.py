"""A replay's consecutive CPU launches, copies and fills run as one compiled program (pad/parallel/driver.py):
the same results, to the bit, as each entry run from Python; plans still validated and made anew."""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest

import pad
from pad.parallel import driver
from tests.unit.four_threads import assert_prints_identical


@pad.kernel
def k_spread(i, cells, w, x, y, hits):
    """A scatter through an index array (coloured or in place by its plan), a read at a fixed index (a
    private float buffer in the adjoint) and an integer count (a private integer buffer)."""
    y[cells[i]] += w[0] * math.sin(x[i])
    hits[0] += 1


@pad.kernel
def k_square(i, x, z):
    z[i] = x[i] * x[i]


@pad.kernel
def k_shift(i, cells, n):
    cells[i] = (cells[i] + 1) % n


def _step(cells, w, x, y, z, hits):
    pad.launch(k_spread, x.shape[0], cells, w, x, y, hits)
    pad.launch(k_square, x.shape[0], x, z)
    pad.launch(k_spread, x.shape[0], cells, w, z, y, hits)


def _arguments(n: int = 300, m: int = 40) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    cells = rng.integers(0, m, n)
    return [
        cells,
        np.array([0.7]),
        rng.uniform(-1, 1, n),
        rng.uniform(0, 1, m),
        np.zeros(n),
        np.zeros(1, np.int64),
    ]


def _gradient_step(args: list[np.ndarray], shadows: list[np.ndarray]):
    """A recorded gradient of ``_step`` (primal launches, kept copies, zeroed shadows, adjoints)."""
    cells, w, x, y, z, hits = args
    dw, dx, dy, dz = shadows

    def step() -> None:
        dw[:], dx[:], dy[:], dz[:] = 0.0, 0.0, 1.0, np.linspace(0.5, 1.5, z.size)
        pad.autodiff(_step, cells, pad.Dup(w, dw), pad.Dup(x, dx), pad.Dup(y, dy), pad.Dup(z, dz), hits)

    return pad.graph(step)


def _pair() -> tuple[list, list]:
    """Two copies of the arguments and their shadows: one to replay driven, one from Python."""
    out = []
    for _ in range(2):
        args = _arguments()
        out.append((args, [np.zeros_like(a) for a in args[1:5]]))
    return out[0], out[1]


def _programs(step) -> list[driver.Program]:
    return [
        e
        for record in step._records.values()
        for run in record._runs or []
        for e in run.entries
        if isinstance(e, driver.Program)
    ]


def test_a_driven_replay_equals_one_from_python_to_the_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    (ours, our_shadows), (theirs, their_shadows) = _pair()
    driven = _gradient_step(ours, our_shadows)
    monkeypatch.setattr(driver, "ENABLED", False)
    from_python = _gradient_step(theirs, their_shadows)
    from_python()
    from_python()
    monkeypatch.setattr(driver, "ENABLED", True)
    driven()
    driven()
    assert _programs(driven) and not _programs(from_python)
    assert any(
        len(p.launches) >= 3 for p in _programs(driven)
    )  # the adjoints, their copies and fills, driven
    for threads in (1, 2, 1):  # a new thread count binds and captures the launches again
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        try:
            driven()
            from_python()
        finally:
            numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        for a, b in zip([*ours, *our_shadows], [*theirs, *their_shadows], strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_profiled_program_stamps_its_rows_in_order_and_computes_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (ours, our_shadows), (theirs, their_shadows) = _pair()
    profiled, plain = _gradient_step(ours, our_shadows), _gradient_step(theirs, their_shadows)
    for _ in range(2):
        profiled()
        plain()
    runs: list = []
    monkeypatch.setattr(driver, "PROFILE", runs)
    profiled()
    monkeypatch.setattr(driver, "PROFILE", None)
    plain()
    for a, b in zip([*ours, *our_shadows], [*theirs, *their_shadows], strict=True):
        np.testing.assert_array_equal(a, b)
    assert [program for program, _ in runs] == _programs(profiled)
    for program, stamps in runs:
        rows = program.table[:, 0] != driver.NOTHING
        assert stamps.shape == (numba.get_num_threads(), len(program.table), 3)
        assert not stamps[:, ~rows].any()
        # each worker's stamps: entered, left its parts, left the wait, row after row
        for worker in stamps[:, rows].reshape(stamps.shape[0], -1):
            assert worker[0] > 0 and (np.diff(worker) >= 0).all()


def test_an_index_array_changed_by_numpy_is_planned_anew() -> None:
    args = _arguments()
    cells = args[0]
    step = pad.graph(_step)
    fresh = [a.copy() for a in args]
    for call in range(4):
        if call == 2:
            cells[:] = cells[::-1].copy()  # NumPy, between replays: the plans must see it
            fresh[0][:] = cells
        step(*args)
        _step(*fresh)
        assert _programs(step) or call == 0
        for a, b in zip(args, fresh, strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_launch_that_writes_a_later_launch_s_index_array_ends_its_program() -> None:
    cells, w, x, y, z, hits = _arguments()
    m = y.size

    def step(cells, w, x, y, z, hits):
        pad.launch(k_square, x.shape[0], x, z)
        pad.launch(k_shift, cells.shape[0], cells, m)  # the next launch is planned from what this stores
        pad.launch(k_spread, x.shape[0], cells, w, x, y, hits)

    graph = pad.graph(step)
    fresh = [a.copy() for a in (cells, w, x, y, z, hits)]
    for _ in range(3):
        graph(cells, w, x, y, z, hits)
        step(*fresh)
    driven = [[launch.variant.kernel for _, launch in p.launches] for p in _programs(graph)]
    assert driven == [["k_square", "k_shift"]]  # k_spread, planned after k_shift ran, on its own
    for a, b in zip((cells, w, x, y, z, hits), fresh, strict=True):
        np.testing.assert_array_equal(a, b)


ONE_AFTER_ANOTHER = """
import numba, numpy as np
from pad.parallel import driver
from tests.unit.test_driver import _gradient_step, _pair, _programs

numba.set_num_threads(4)
(ours, our_shadows), (theirs, their_shadows) = _pair()
driven = _gradient_step(ours, our_shadows)
driver.ENABLED = False
from_python = _gradient_step(theirs, their_shadows)
from_python()
from_python()  # its record's runs made without programs
driver.ENABLED = True
driver._drive = numba.njit(driver._drive.py_func)  # its workers one after another (not cached: a twin)
for _ in range(2):
    driven()
for _ in range(3):
    driven()
    from_python()
assert not _programs(from_python)
launches = [p.table[p.table[:, 0] == driver.LAUNCH] for p in _programs(driven)]
assert any(len(t) >= 3 and (t[:, 3] >= 4).all() for t in launches)
for a, b in zip([*ours, *our_shadows], [*theirs, *their_shadows], strict=True):
    assert np.array_equal(a, b)
print("identical")
"""


def test_a_program_runs_whole_when_its_workers_run_one_after_another() -> None:
    """A program's workers pass from row to row by counting the parts done; the first to run claims all
    that no other has, so a program whose workers run one after another (here its parallel loop compiled
    serial, each launch in at least 4 chunks) completes, with the results of the entries run from Python."""
    assert_prints_identical(ONE_AFTER_ANOTHER)
