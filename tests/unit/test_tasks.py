"""pad.tasks: task-graph gradients equal the sequential program's, under several pool sizes, many times."""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pad
from pad import tasks
from tests.unit import kops, npops
from tests.unit.npops import sin_to

N = 16


# ---------------------------------------------------------------------------------------------- DAG shapes
# Each program takes (ops, x, ws, out): ops the module of operations (NumPy ops or kernel launches), x the
# input, ws scratch arrays, out the output; ``go(fn, *args)`` either spawns (returning a task) or calls at
# once (the sequential reference, returning None).
def diamond(go: Callable, ops, x, ws, out) -> None:
    a = go(ops.sin_to, x, ws[0])
    _wait(a)
    b, c = go(ops.sin_to, ws[0], ws[1]), go(ops.sin_to, ws[0], ws[2])
    _wait(b, c)
    d = go(_sum_into, ops, (ws[1], ws[2]), out)
    _wait(d)


def chain(go: Callable, ops, x, ws, out) -> None:
    src = x
    for w in ws[:4]:
        t = go(ops.sin_to, src, w)
        _wait(t)
        src = w
    _wait(go(_sum_into, ops, (src,), out))


def fan(go: Callable, ops, x, ws, out) -> None:
    ts = [go(ops.sin_to, x, w) for w in ws]  # every task reads x: adjoints accumulate into one shadow
    _wait(*ts)
    _wait(go(_sum_into, ops, tuple(ws), out))


def nested(go: Callable, ops, x, ws, out) -> None:
    def branch(src, w1, w2):
        inner = go(ops.sin_to, src, w1)
        _wait(inner)
        ops.sin_to(w1, w2)

    ts = [go(branch, x, ws[2 * i], ws[2 * i + 1]) for i in range(3)]
    _wait(*ts)
    _wait(go(_sum_into, ops, (ws[1], ws[3], ws[5]), out))


def _sum_into(ops, parts, out) -> None:
    for k, p in enumerate(parts):
        ops.axpy(1.0 + k, p, out)


def _wait(*ts) -> None:
    tasks.wait_all([t for t in ts if t is not None])


def _call(fn, *args):
    fn(*args)


def _gradient(program: Callable, ops, go: Callable) -> np.ndarray:
    x = np.linspace(0.1, 1.0, N)
    ws = [np.zeros(N) for _ in range(6)]
    out = np.zeros(N)
    dx, dout = np.zeros(N), np.linspace(1.0, 2.0, N)
    args = [pad.Dup(x, dx), [pad.Dup(w, np.zeros(N)) for w in ws], pad.Dup(out, dout)]

    def f(x, *rest):
        program(go, ops, x, list(rest[:-1]), rest[-1])

    pad.autodiff(f, args[0], *args[1], args[2])
    return dx


@pytest.mark.parametrize("ops", [npops, kops], ids=["numpy", "kernels"])
@pytest.mark.parametrize("program", [diamond, chain, fan, nested])
@pytest.mark.parametrize("threads", [1, 2, 4])
def test_dag_gradient_equals_sequential(program, threads, ops):
    expected = _gradient(program, ops, _call)
    assert np.abs(expected).max() > 0
    with ThreadPoolExecutor(threads) as ex, tasks.executor(ex):
        for _ in range(15):
            np.testing.assert_allclose(_gradient(program, ops, tasks.spawn), expected, rtol=1e-13, atol=1e-14)


def test_fan_out_accumulation_has_no_race():
    """Adjoints that read-modify-write one shadow slowly would lose updates without the shadow locks."""

    def f(x, w1, w2, w3, w4):
        ts = [tasks.spawn(sin_to, x, w, 0.002) for w in (w1, w2, w3, w4)]
        tasks.wait_all(ts)

    x = np.linspace(0.0, 1.0, N)
    with ThreadPoolExecutor(4) as ex, tasks.executor(ex):
        for _ in range(3):
            dx = np.zeros(N)
            ws = [pad.Dup(np.zeros(N), np.ones(N)) for _ in range(4)]
            pad.autodiff(f, pad.Dup(x, dx), *ws)
            np.testing.assert_allclose(dx, 4 * np.cos(x))


@pytest.mark.parametrize("threads", [2, 4])
def test_adjoints_of_independent_branches_overlap(threads):
    """Both adjoints must be inside their reverse at once to pass the barrier (else it times out)."""
    barrier = threading.Barrier(2)

    def f(x1, y1, x2, y2):
        t1 = tasks.spawn(sin_to, x1, y1, 0.0, barrier)
        t2 = tasks.spawn(sin_to, x2, y2, 0.0, barrier)
        t1.wait()
        t2.wait()

    x1, x2 = np.full(N, 0.3), np.full(N, 0.7)
    dx1, dx2 = np.zeros(N), np.zeros(N)
    with ThreadPoolExecutor(threads) as ex, tasks.executor(ex):
        pad.autodiff(
            f,
            pad.Dup(x1, dx1),
            pad.Dup(np.zeros(N), np.ones(N)),
            pad.Dup(x2, dx2),
            pad.Dup(np.zeros(N), np.ones(N)),
        )
    assert not barrier.broken
    np.testing.assert_allclose(dx1, np.cos(x1))
    np.testing.assert_allclose(dx2, np.cos(x2))


def test_forward_mode_runs_tasks_with_tangents():
    x, tx = np.linspace(0.0, 1.0, N), np.ones(N)
    out, tout = np.zeros(N), np.zeros(N)
    ws = [pad.Dup(np.zeros(N), np.zeros(N)) for _ in range(6)]
    with ThreadPoolExecutor(2) as ex, tasks.executor(ex):
        pad.fwddiff(
            lambda x, *r: diamond(tasks.spawn, kops, x, list(r[:-1]), r[-1]),
            pad.Dup(x, tx),
            *ws,
            pad.Dup(out, tout),
        )
    expected = 3 * np.cos(np.sin(x)) * np.cos(x)  # out = sin(sin(x)) + 2 sin(sin(x))
    np.testing.assert_allclose(tout, expected)


def test_check_grad_through_tasks():
    x = np.linspace(0.1, 1.0, N)
    ws = [pad.Dup(np.zeros(N), np.zeros(N)) for _ in range(6)]

    def f(x, *rest):
        fan(tasks.spawn, kops, x, list(rest[:-1]), rest[-1])

    pad.check_grad(f, pad.Dup(x, np.zeros(N)), *ws, pad.Dup(np.zeros(N), np.zeros(N)))


# ---------------------------------------------------------------------------------------------- plain use
def test_plain_tasks_return_results_and_nest_on_one_thread():
    def parent(k):
        kids = [tasks.spawn(lambda j: j * j, j) for j in range(k)]
        return sum(tasks.wait_all(kids))

    with ThreadPoolExecutor(1) as ex, tasks.executor(ex):
        assert tasks.spawn(parent, 5).wait() == 30


def test_default_pool_runs_tasks():
    assert tasks.wait_all([tasks.spawn(abs, -k) for k in range(4)]) == [0, 1, 2, 3]


# ---------------------------------------------------------------------------------------------- errors
def _failing(x):
    raise ValueError("bad task input")


def test_failure_reraises_in_waiter_with_original_traceback():
    t = tasks.spawn(_failing, 1)
    with pytest.raises(ValueError, match="bad task input") as info:
        t.wait()
    assert "_failing" in "".join(traceback.format_exception(info.value))


def test_failure_inside_autodiff_reraises():
    def f(x):
        tasks.spawn(_failing, x).wait()

    with pytest.raises(ValueError, match="bad task input"):
        pad.autodiff(f, pad.Dup(np.zeros(N), np.zeros(N)))


def test_failure_of_an_adjoint_reraises():
    class Broken:
        def reverse(self):
            raise RuntimeError("adjoint failed")

    def body(x, y):
        sin_to(x, y)
        pad.tape.current().record(Broken())

    def f(x, y):
        tasks.spawn(body, x, y).wait()

    with pytest.raises(RuntimeError, match="adjoint failed"):
        pad.autodiff(f, pad.Dup(np.ones(N), np.zeros(N)), pad.Dup(np.zeros(N), np.ones(N)))


@pytest.mark.parametrize("mode", [pad.autodiff, pad.fwddiff])
def test_task_never_waited_is_an_error_at_end_of_forward(mode):
    def f(x, y):
        tasks.spawn(sin_to, x, y)

    with pytest.raises(RuntimeError, match=r"never waited for.*test_tasks.py"):
        mode(f, pad.Dup(np.ones(N), np.zeros(N)), pad.Dup(np.zeros(N), np.ones(N)))


def test_executor_must_share_memory():
    with (
        pytest.raises(TypeError, match="shares this process's memory"),
        tasks.executor(ProcessPoolExecutor(1)),
    ):
        pass
    with pytest.raises(TypeError), tasks.executor("threads"):  # type: ignore[arg-type]
        pass


def test_executor_shut_down_before_the_reverse_pass():
    def f(x, y):
        with ThreadPoolExecutor(2) as ex, tasks.executor(ex):
            tasks.spawn(sin_to, x, y).wait()

    x, dx = np.linspace(0.0, 1.0, N), np.zeros(N)
    pad.autodiff(f, pad.Dup(x, dx), pad.Dup(np.zeros(N), np.ones(N)))
    np.testing.assert_allclose(dx, np.cos(x))


def test_task_waited_across_a_checkpointed_step_is_refused():
    def f(x, y, z):
        t = tasks.spawn(sin_to, x, y)
        pad.checkpoint.loop(lambda k, z: t.wait() if k == 1 else sin_to(z, z), 3, z, snapshots=1)

    with pytest.raises(RuntimeError, match="different sides of a checkpointed step"):
        pad.autodiff(f, *(pad.Dup(np.ones(N), np.ones(N)) for _ in range(3)))


@st.composite
def dags(draw):
    """A random DAG: task j reads x and/or earlier tasks' outputs; a random order of the remaining waits."""
    k = draw(st.integers(2, 6))
    inputs = [draw(st.lists(st.integers(-1, j - 1), min_size=1, max_size=3, unique=True)) for j in range(k)]
    return inputs, draw(st.permutations(range(k)))


@settings(max_examples=25, deadline=None)
@given(dag=dags(), threads=st.sampled_from([1, 2, 4]))
def test_random_dag_gradient_equals_sequential(dag, threads):
    inputs, last_waits = dag
    k = len(inputs)

    def body(srcs, scratch, out):
        for c, p in enumerate(srcs):
            sin_to(p, scratch)
            npops.axpy(1.0 + c, scratch, out)

    def program(go, x, arrays):
        outs, scratch = arrays[:k], arrays[k:]
        ts: dict[int, object] = {}
        for j in range(k):
            for i in inputs[j]:
                if i >= 0 and ts.get(i) is not None:
                    ts.pop(i).wait()
            ts[j] = go(body, [x if i < 0 else outs[i] for i in inputs[j]], scratch[j], outs[j])
        for j in last_waits:
            if ts.get(j) is not None:
                ts.pop(j).wait()

    def gradient(go):
        x, dx = np.linspace(0.1, 1.0, N), np.zeros(N)
        arrays = [pad.Dup(np.zeros(N), np.full(N, 1.0 + j)) for j in range(k)]
        arrays += [pad.Dup(np.zeros(N), np.zeros(N)) for _ in range(k)]
        pad.autodiff(lambda x, *a: program(go, x, a), pad.Dup(x, dx), *arrays)
        return dx

    expected = gradient(_call)
    with ThreadPoolExecutor(threads) as ex, tasks.executor(ex):
        np.testing.assert_allclose(gradient(tasks.spawn), expected, rtol=1e-13, atol=1e-14)
