"""``pad.graph``: a step's launches recorded once and replayed; new arguments recorded anew; steps that
cannot be replayed run as they are; inside autodiff the step is differentiated."""

from __future__ import annotations

import numpy as np
import pytest

import pad
import pad.mpi


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


def test_arguments_it_cannot_compare_are_refused():
    step = pad.graph(_step)
    with pytest.raises(TypeError, match="cannot tell one object argument from another"):
        step(object(), np.ones(2), np.zeros(2))


def test_a_step_that_differentiates_inside_runs_every_time():
    x, dx = np.ones(3), np.zeros(3)
    y, dy = np.zeros(3), np.ones(3)

    def step():
        dy[...] = 1.0
        pad.autodiff(_step, pad.Active(2.0), pad.Dup(x, dx), pad.Dup(y, dy))

    g = pad.graph(step)
    g()
    g()
    assert g.why is not None and "differentiates" in g.why
    np.testing.assert_array_equal(dx, 2 * (2 * 2.0) * np.ones(3))  # two calls, each adding d(sum y)/dx = 2 a


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
