"""``pad.graph``: a step's launches recorded once and replayed; new arguments recorded anew; steps that
cannot be replayed run as they are; inside autodiff the step is differentiated; a step that differentiates
is replayed whole, forward and adjoint."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest

import pad
import pad.mpi
from pad.kernel.analysis import Cover
from pad.replay import Recording


@pad.kernel
def k_axpy(i, a, x, y):
    y[i] = y[i] + a * x[i]


@pad.kernel
def k_count(i, counts):
    counts[i] += 1


def _step(a, x, y):
    pad.launch(k_axpy, x.shape[0], a, x, y)
    pad.launch(k_axpy, x.shape[0], a, x, y)


def test_replays_give_what_running_the_step_gives():
    x = np.linspace(0.0, 1.0, 7)
    y_graph, y_plain = np.zeros(7), np.zeros(7)
    step = pad.graph(_step)
    for _ in range(4):
        step(2.0, x, y_graph)
        _step(2.0, x, y_plain)
    np.testing.assert_array_equal(y_graph, y_plain)
    assert step.why is None


def test_a_replay_skips_the_steps_python():
    calls = []

    def step(counts):
        calls.append(1)
        pad.launch(k_count, counts.shape[0], counts)

    counts = np.zeros(5, np.int64)
    g = pad.graph(step)
    for _ in range(5):
        g(counts)
    assert len(calls) == 1 and (counts == 5).all()


def test_new_arguments_are_recorded_anew_never_replayed_stale():
    """A new scalar value, another array, or the same array reshaped: each is a new record."""
    x, y, other = np.ones(4), np.zeros(4), np.zeros(4)
    step = pad.graph(_step)
    step(1.0, x, y)
    step(1.0, x, y)
    step(3.0, x, y)  # a scalar changed: y += 2 * 3
    assert (y == 2 + 2 + 6).all()
    step(1.0, x, other)
    assert (other == 2).all() and (y == 10).all()
    flat = np.zeros(4)
    step(1.0, x, flat)
    step(1.0, x.reshape(2, 2)[0], flat[:2])  # a view is another array
    assert flat.tolist() == [4.0, 4.0, 2.0, 2.0]


@dataclasses.dataclass
class _Fields:
    a: Any
    x: Any
    y: Any


def _fields_step(f):
    _step(f.a, f.x, f.y)


def test_a_dataclass_is_keyed_by_what_it_holds_now():
    """The same dataclass with a field replaced, by another array or a view, or a NumPy scalar of another
    value: each is a new record."""
    f = _Fields(np.float64(1.0), np.ones(4), np.zeros(4))
    step = pad.graph(_fields_step)
    step(f)
    step(f)
    assert (f.y == 4).all()
    f.a = np.float64(3.0)  # same type, another value
    step(f)
    assert (f.y == 10).all()
    first, f.y = f.y, np.zeros(4)  # a field replaced
    step(f)
    assert (f.y == 6).all() and (first == 10).all()
    f.x, f.y = f.x[::2], f.y[1:3]  # views: other arrays of other layouts
    step(f)
    assert f.y.tolist() == [12.0, 12.0] and f.y.base.tolist() == [6.0, 12.0, 12.0, 6.0]


def test_arguments_it_cannot_compare_are_refused():
    step = pad.graph(_step)
    with pytest.raises(TypeError, match="cannot tell one object argument from another"):
        step(object(), np.ones(2), np.zeros(2))


@pad.kernel
def k_wave(i, x, t):
    t[i] = math.sin(x[i]) * x[i]


@pad.kernel
def k_grow(i, t, y):
    y[i] = y[i] * t[i] + t[i]


def _grown(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """What ``_differentiated`` computes, in NumPy."""
    t = np.sin(x) * x
    y = y * t + t
    t = np.sin(y) * y
    return y * t + t


def _differentiated(put: Any) -> tuple[Any, Any]:
    """``step(x, y, dx, dy)``: the gradient of ``J = <seed, y after>`` by ``autodiff`` of a function that
    keeps a value it then overwrites (``t``, an intermediate reached by closure) and reads and writes ``y``,
    and the seed."""
    seed = put(np.linspace(0.5, 1.5, 9))
    t = put(np.zeros(9))

    def f(x: Any, y: Any) -> None:
        pad.launch(k_wave, 9, x, t)
        pad.launch(k_grow, 9, t, y)
        pad.launch(k_wave, 9, y, t)  # overwrites the t that k_grow's adjoint reads
        pad.launch(k_grow, 9, t, y)

    def step(x: Any, y: Any, dx: Any, dy: Any) -> None:
        pad.copy(dy, seed)
        pad.fill(dx, 0.0)
        pad.autodiff(f, pad.Dup(x, dx), pad.Dup(y, dy))

    return step, seed


def check_replayed_gradient(put: Any, get: Any) -> None:
    """A replayed differentiated step gives what running it gives, call after call, and its gradient
    agrees with central differences; the arrays are ``put(numpy array)``, read back with ``get``."""
    x0, y0 = np.linspace(-1.0, 1.0, 9), np.linspace(0.2, 0.6, 9)
    launched, seed = _differentiated(put)
    replayed = pad.graph(_differentiated(put)[0])
    ours = [put(a) for a in (x0, y0, np.zeros(9), np.zeros(9))]
    theirs = [put(a) for a in (x0, y0, np.zeros(9), np.zeros(9))]
    for _ in range(3):
        before = get(ours[1]).copy()
        replayed(*ours)
        launched(*theirs)
        assert replayed.why is None
        for a, b in zip(ours, theirs, strict=True):
            np.testing.assert_array_equal(get(a), get(b))
    v, w = np.cos(np.arange(9.0)), np.sin(np.arange(9.0) + 1.0)
    h, s = 1e-6, get(seed)
    fd = (s @ _grown(x0 + h * v, before + h * w) - s @ _grown(x0 - h * v, before - h * w)) / (2 * h)
    ad = get(ours[2]) @ v + get(ours[3]) @ w
    assert ad == pytest.approx(fd, rel=1e-7)


def test_a_differentiated_step_is_replayed():
    check_replayed_gradient(lambda a: a.copy(), lambda a: a)


def test_a_differentiated_step_replays_without_its_python():
    calls = []
    step, _ = _differentiated(np.copy)

    def counted(*args: Any) -> None:
        calls.append(1)
        step(*args)

    g = pad.graph(counted)
    state = [np.linspace(-1.0, 1.0, 9), np.ones(9), np.zeros(9), np.zeros(9)]
    for _ in range(4):
        g(*state)
    assert len(calls) == 1 and g.why is None


@pad.kernel
def k_rows(i, x, combined, t, u):
    """``t`` stored whole either way; ``u`` only when ``combined`` is false (LULESH's ``fs`` and ``fh``)."""
    for k in range(3):
        if combined:
            t[0, k, i] = x[i] * k
            t[1, k, i] = x[i]
        else:
            t[0, k, i] = x[i]
            t[1, k, i] = x[i] * x[i]
            u[k, i] = x[i]


@pad.kernel
def k_partly(i, x, n, t, u, w, z, y, v):
    """Stores that do not cover their arrays on every path, or that read them."""
    if x[i] > 0.0:
        t[i] = x[i]
    for k in range(n):
        u[k, i] = x[i]
    for k in range(3):
        if x[i] > 2.0:
            break
        v[k, i] = x[i]
    w[0, i] = x[i]
    w[2, i] = x[i]
    z[i + 1] = x[i]
    y[i] = x[i]
    y[i] += x[i]


def test_adjoints_know_which_shadows_they_leave_zero():
    x, t, u = np.ones(5), np.zeros((2, 3, 5)), np.zeros((3, 5))
    v = k_rows.variant((x, 1, t, u), "adjoint", (True, False, True, True))
    assert v.covers == {2: Cover(2, 0, (2, 3, 0)), 3: Cover(1, 0, (3, 0), ((1, False),))}
    assert v.left_zero(5, (x, 1, t, u)) == [2]
    assert v.left_zero(5, (x, 0, t, u)) == [2, 3]
    assert v.left_zero(4, (x, 0, t, u)) == []  # a launch over part of the arrays
    assert v.left_zero(5, (x, 0, np.zeros((3, 3, 5)), u)) == [3]  # a row no store reaches
    args = (x, 3, np.ones(5), np.ones((3, 5)), np.ones((3, 5)), np.ones(6), np.ones(5), np.ones((3, 5)))
    v = k_partly.variant(args, "adjoint", (True, False, True, True, True, True, True, True))
    assert v.covers == {5: Cover(0, 1, (0,))}  # z[i + 1]: never the whole of z
    assert v.left_zero(5, args) == []


@pad.kernel
def k_square_rows(i, x, t):
    t[0, i] = x[i] * x[i]
    t[1, i] = math.sin(x[i])


@pad.kernel
def k_mix(i, t, y):
    y[i] = y[i] + t[0, i] * t[1, i]


def _overwritten_twice(x: Any, y: Any, transposed: bool = False) -> None:
    """``t``, made here, is stored whole, read, stored whole again and read: the seeds its second store's
    adjoint reads are wrong if a replay starts with what the first one's left in its shadow. ``transposed``:
    ``t`` is a view of all of an array with its axes the other way round (LULESH's corner forces)."""
    t = np.empty((x.shape[0], 2)).T if transposed else np.empty((2, x.shape[0]))
    pad.launch(k_square_rows, x.shape[0], x, t)
    pad.launch(k_mix, x.shape[0], t, y)
    pad.launch(k_square_rows, x.shape[0], y, t)
    pad.launch(k_mix, x.shape[0], t, y)


@pytest.mark.parametrize("transposed", [False, True])
def test_a_replay_fills_no_shadow_its_adjoint_leaves_zero(transposed: bool):
    x0, y0 = np.linspace(-1.0, 1.0, 6), np.linspace(0.2, 0.7, 6)
    seed = np.linspace(1.0, 2.0, 6)
    x, y, dx, dy = x0.copy(), y0.copy(), np.zeros(6), np.zeros(6)

    def f(x: Any, y: Any) -> None:
        _overwritten_twice(x, y, transposed)

    def step() -> None:
        x[:], y[:], dx[:], dy[:] = x0, y0, 0.0, seed
        pad.autodiff(f, pad.Dup(x, dx), pad.Dup(y, dy))

    step()
    expected = dx.copy(), dy.copy()
    g = pad.graph(lambda: pad.autodiff(f, pad.Dup(x, dx), pad.Dup(y, dy)))
    record = None
    for _ in range(3):
        x[:], y[:], dx[:], dy[:] = x0, y0, 0.0, seed
        g()
        record = record or next(iter(g._records.values()))
        np.testing.assert_array_equal(dx, expected[0])
        np.testing.assert_array_equal(dy, expected[1])
    assert g.why is None and [e.args[0].shape for e in record.resets] == [(6, 2) if transposed else (2, 6)]
    shadow = record.resets[0].args[0]
    shadow[:] = 1.0  # as a replay that stopped part way leaves it
    record.finished = False
    x[:], y[:], dx[:], dy[:] = x0, y0, 0.0, seed
    g()
    np.testing.assert_array_equal(dx, expected[0])
    shadow[:] = 1.0  # a pad bug: under PAD_DEBUG the replay finds it
    with pad.debug(), pytest.raises(RuntimeError, match="was not zero when a replay began"):
        g()


def test_new_activity_is_recorded_anew():
    """The annotations are arguments: ``Const`` in place of ``Dup`` is another record, not a stale replay."""
    x, y, dx, dy = np.linspace(0.5, 1.5, 5), np.zeros(5), np.zeros(5), np.ones(5)

    def step(xa: Any, ya: Any) -> None:
        pad.fill(dx, 0.0)
        pad.autodiff(lambda x, y: _step(2.0, x, y), xa, ya)

    g = pad.graph(step)
    for _ in range(2):
        g(pad.Dup(x, dx), pad.Dup(y, dy))
        np.testing.assert_array_equal(dx, 4.0)
    g(pad.Const(x), pad.Dup(y, dy))
    np.testing.assert_array_equal(dx, 0.0)
    g(pad.Dup(x, dx), pad.Dup(y, dy))
    np.testing.assert_array_equal(dx, 4.0)
    assert g.why is None and len(g._records) == 2


def test_a_differentiated_step_it_cannot_replay_runs_every_time():
    """Derivatives of Active scalars come back to the step's Python, which a replay skips; fwddiff's tangents
    of a collective are not sent by a replay."""
    x, dx = np.ones(3), np.zeros(3)
    y, dy = np.zeros(3), np.ones(3)
    found = []

    def step():
        found.append(pad.autodiff(_step, pad.Active(2.0), pad.Dup(x, dx), pad.Dup(y, dy))[0])

    g = pad.graph(step)
    g()
    g()
    assert g.why is not None and "Active scalar" in g.why
    assert len(found) == 2
    np.testing.assert_array_equal(dx, 2 * (2 * 2.0) * np.ones(3))  # two calls, each adding d(sum y)/dx = 2 a

    comm = pad.mpi.Comm(pad.mpi.COMM_WORLD.mpi.Split(pad.mpi.COMM_WORLD.rank))  # one rank each
    total, dtotal = np.zeros(3), np.zeros(3)

    def tangents() -> None:
        pad.fwddiff(
            lambda x, t: comm.Allreduce(x, t, pad.mpi.SUM), pad.Dup(x, np.ones(3)), pad.Dup(total, dtotal)
        )

    g = pad.graph(tangents)
    g()
    assert g.why is not None and "forward mode (fwddiff)" in g.why
    np.testing.assert_array_equal(dtotal, 1.0)


def test_a_differentiated_collective_is_replayed():
    """A collective of host buffers inside ``autodiff``: its transfer and its adjoint's are redone by a
    replay, which gives the gradient running it gives."""
    comm = pad.mpi.Comm(pad.mpi.COMM_WORLD.mpi.Split(pad.mpi.COMM_WORLD.rank))  # one rank each
    x, dx = np.linspace(0.5, 1.5, 3), np.zeros(3)
    total, dtotal = np.zeros(3), np.zeros(3)

    def f(x: Any, total: Any) -> None:
        pad.launch(k_wave, 3, x, total)
        comm.Allreduce(pad.mpi.IN_PLACE, total, pad.mpi.SUM)
        pad.launch(k_grow, 3, x, total)

    def step() -> None:
        pad.fill(dtotal, 1.0)
        pad.autodiff(f, pad.Dup(x, dx), pad.Dup(total, dtotal))

    g = pad.graph(step)
    live_dx = np.zeros(3)
    for _ in range(3):
        g()
        assert g.why is None
        live_total, live_seed = np.zeros(3), np.ones(3)
        pad.autodiff(f, pad.Dup(x, live_dx), pad.Dup(live_total, live_seed))
        np.testing.assert_array_equal(total, live_total)
        np.testing.assert_array_equal(dx, live_dx)
    assert len(g._records) == 1


def test_inside_autodiff_the_step_is_differentiated():
    step = pad.graph(_step)
    x = np.linspace(0.5, 1.5, 5)
    step(2.0, x, np.zeros(5))  # a record exists: autodiff must not replay it
    y, dy, dx = np.zeros(5), np.ones(5), np.zeros(5)
    (da,) = pad.autodiff(lambda a, x, y: step(a, x, y), pad.Active(2.0), pad.Dup(x, dx), pad.Dup(y, dy))
    np.testing.assert_allclose(y, 4.0 * x)
    np.testing.assert_allclose(dx, 4.0)
    assert da == pytest.approx(2.0 * x.sum())


def test_single_rank_collectives_are_replayed():
    comm = pad.mpi.Comm(pad.mpi.COMM_WORLD.mpi.Split(pad.mpi.COMM_WORLD.rank))  # one rank each
    x, total = np.ones(3), np.zeros(3)

    def step(x, total):
        pad.launch(k_axpy, 3, 1.0, x, x)
        comm.Allreduce(x, total, pad.mpi.SUM)

    g = pad.graph(step)
    for _ in range(3):
        g(x, total)
    assert g.why is None and (x == 8).all() and (total == 8).all()


def test_a_record_of_device_and_host_work_replays_it_in_order(monkeypatch):
    """Runs of CuPy entries become CUDA graphs, captured once each (a fake graph here, which runs them when
    launched); the host entries between them (MPI work) run in Python in their place, every replay."""
    done: list[str] = []
    captured: list[int] = []

    class Graph:
        def __init__(self, entries: list[Any]) -> None:
            self.entries = entries

        def launch(self) -> None:
            done.append("launch")
            for entry in self.entries:
                entry()

    def capture(record: Recording, entries: list[Any]) -> Graph:
        captured.append(len(entries))
        return Graph(entries)

    monkeypatch.setattr(Recording, "_capture", capture)
    record = Recording()
    for name, device in (
        ("a", True),
        ("b", True),
        ("send", False),
        ("c", True),
        ("wait", False),
        ("d", False),
    ):
        record.add(lambda name=name: done.append(name), cupy=device)
    record.replay()
    record.replay()
    assert captured == [2, 1]
    assert done == ["launch", "a", "b", "send", "launch", "c", "wait", "d"] * 2
