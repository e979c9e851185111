"""pad.checkpoint: checkpointed gradients equal keep-everything gradients, within the snapshot budget."""

from __future__ import annotations

import errno
import gc
import os
import tracemalloc

import numpy as np
import pytest
from checkpoint_schedules import optimal_steps_binomial

import pad
from pad import checkpoint, tasks
from tests.unit import kops, npops
from tests.unit.npops import axpy, sin_to

N = 8


def make_step(ops):
    def step(t, u, v, w):
        """Ping-pong state (u and v written on alternate steps) and an array first written late (w)."""
        src, dst = (u, v) if t % 2 == 0 else (v, u)
        ops.sin_to(src, dst)
        ops.axpy(0.25, src, dst)
        if t >= 3:
            ops.axpy(0.5, dst, w)

    return step


step = make_step(npops)


def _run(nsteps, snapshots, storage="memory", directory=None, while_=False, step=step):
    u = np.linspace(0.1, 1.0, N)
    v, w = np.zeros(N), np.zeros(N)
    du, dv, dw = np.zeros(N), np.linspace(1.0, 2.0, N), np.linspace(-1.0, 1.0, N)
    stats = checkpoint.Stats()
    opts = {"snapshots": snapshots, "storage": storage, "directory": directory, "stats": stats}

    def f(u, v, w):
        if while_:
            count = [0]

            def more(u, v, w):
                count[0] += 1
                return count[0] <= nsteps

            assert checkpoint.while_loop(more, step, u, v, w, **opts) == nsteps
        else:
            checkpoint.loop(step, nsteps, u, v, w, **opts)

    pad.autodiff(f, pad.Dup(u, du), pad.Dup(v, dv), pad.Dup(w, dw))
    return (u, v, w, du, dv, dw), stats


_reference: dict[int, tuple] = {}


def _expected(nsteps):
    if nsteps not in _reference:
        _reference[nsteps] = _run(nsteps, None)[0]
    return _reference[nsteps]


@pytest.mark.parametrize("nsteps", [1, 2, 7, 50, 200])
@pytest.mark.parametrize("snapshots", [1, 2, 3, 4, 5])
def test_loop_matches_keep_everything(nsteps, snapshots):
    got, stats = _run(nsteps, snapshots)
    for a, b in zip(got, _expected(nsteps), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-14)
    assert stats.steps == optimal_steps_binomial(nsteps, min(snapshots, nsteps - 1))
    assert stats.recomputed == stats.steps - nsteps == checkpoint.optimal_recomputations(nsteps, snapshots)
    assert stats.snapshots_peak <= snapshots
    written = min(nsteps, 2) + (nsteps > 3)  # v, then u, then w from step 3 on
    assert stats.state_bytes == written * N * 8  # exactly the arrays the steps overwrite
    assert stats.peak_bytes <= snapshots * stats.state_bytes


@pytest.mark.parametrize("nsteps", [1, 2, 7, 50, 200])
@pytest.mark.parametrize("snapshots", [1, 2, 5])
def test_while_loop_matches_keep_everything(nsteps, snapshots):
    got, stats = _run(nsteps, snapshots, while_=True)
    for a, b in zip(got, _expected(nsteps), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-14)
    assert stats.snapshots_peak <= snapshots
    assert stats.peak_bytes <= snapshots * stats.state_bytes
    assert stats.steps >= 2 * nsteps - 1  # every step recomputed at least once to record it
    optimum = optimal_steps_binomial(nsteps, min(snapshots, nsteps - 1))
    assert stats.steps <= 1.6 * optimum + 2  # online: within 5-60% of the offline optimum here


@pytest.mark.parametrize("nsteps,snapshots", [(7, 1), (20, 3)])
def test_loop_of_kernel_launches(nsteps, snapshots):
    kstep = make_step(kops)
    got, stats = _run(nsteps, snapshots, step=kstep)
    for a, b in zip(got, _expected(nsteps), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    assert stats.steps == optimal_steps_binomial(nsteps, snapshots)
    got, _ = _run(nsteps, snapshots, step=kstep, while_=True)
    for a, b in zip(got, _expected(nsteps), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------------------------------------- unread overwrites
@pad.kernel
def _stencil(i, c, u, unew):
    j = i + 1
    unew[j] = u[j] + c * (u[j - 1] - 2.0 * u[j] + u[j + 1]) - 0.3 * u[j] * (u[j] - u[j - 1])


@pad.kernel
def _scaled(i, c, x, y):
    y[i] = c * x[i] * x[i]


@pad.kernel
def _copy_back(i, x, y):
    y[i] = x[i]
    x[i] = 0.5 * y[i]


def _stencil_step(t, u, v):
    """Ping-pong over the interior: the boundary cells of both arrays keep their first values for good."""
    src, dst = (u, v) if t % 2 == 0 else (v, u)
    pad.launch(_stencil, src.shape[0] - 2, 0.2, src, dst)


def _grads(stepper, nsteps, snapshots, storage="memory", directory=None):
    u = 0.5 + 0.4 * np.sin(np.linspace(0.0, 6.0, N))
    v = np.linspace(-0.3, 0.2, N)  # boundary values differ from u's: the snapshots must hold v[0], v[-1]
    du, dv = np.linspace(1.0, 2.0, N), np.linspace(-1.0, 0.5, N)
    stats = checkpoint.Stats()
    opts = {"snapshots": snapshots, "storage": storage, "directory": directory, "stats": stats}
    pad.autodiff(lambda u, v: checkpoint.loop(stepper, nsteps, u, v, **opts), pad.Dup(u, du), pad.Dup(v, dv))
    return (u, v, du, dv), stats


def test_kernels_know_what_they_overwrite_unread():
    x = np.ones(N)
    assert _stencil.variant((0.2, x, x.copy()), "adjoint", (False, True, True)).overwrites == {2: 1}
    assert _scaled.variant((0.2, x, x.copy()), "primal").overwrites == {2: 0}
    assert kops._sin.variant((x, x.copy()), "primal").overwrites == {1: 0}
    assert kops._axpy.variant((0.2, x, x.copy()), "primal").overwrites == {}  # y[i] += ... reads y
    assert _copy_back.variant((x, x.copy()), "primal").overwrites == {}  # reads y after storing it

    @pad.kernel
    def conditional(i, x, y):
        if x[i] > 0.0:
            y[i] = 1.0

    @pad.kernel
    def data_index(i, x, y, k):
        y[k[i]] = x[i]

    @pad.kernel
    def shifted(i, x, y, z):
        k = 2 + i
        j = k - 3
        y[j] = x[i]
        m = i
        if x[i] > 0.0:
            m = i + 1
        z[m] = x[i]

    @pad.kernel
    def either_way(i, x, y, z):
        if i == 0:
            y[i] = x[i]
            z[i] = x[i]
        else:
            y[i] = x[i] * x[i - 1]
            z[i] = 1.0
            return
        z[i] = 2.0

    @pad.kernel
    def returns_early(i, x, y, z):
        z[i] = x[i]
        if x[i] > 0.0:
            return
        y[i] = x[i]

    @pad.kernel
    def returns_from_a_loop(i, x, y, z):
        z[i] = x[i]
        for k in range(3):
            if x[i] > k:
                return
        y[i] = x[i]

    assert conditional.variant((x, x.copy()), "primal").overwrites == {}
    assert returns_from_a_loop.variant((x, x.copy(), x.copy()), "primal").overwrites == {2: 0}
    assert either_way.variant((x, x.copy(), x.copy()), "primal").overwrites == {1: 0}  # z: twice on a path
    assert returns_early.variant((x, x.copy(), x.copy()), "primal").overwrites == {2: 0}  # y: on one path
    assert data_index.variant((x, x.copy(), np.arange(N)), "primal").overwrites == {}
    assert shifted.variant((x, x.copy(), x.copy()), "primal").overwrites == {1: -1}  # z: index not affine


@pytest.mark.parametrize("nsteps", [1, 2, 7, 50, 200])
@pytest.mark.parametrize("snapshots", [1, 2, 3, 4, 5])
def test_snapshots_leave_out_what_the_next_step_overwrites_unread(nsteps, snapshots):
    got, stats = _grads(_stencil_step, nsteps, snapshots)
    want, _ = _grads(_stencil_step, nsteps, None)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-14)
    assert stats.steps == optimal_steps_binomial(nsteps, min(snapshots, nsteps - 1))
    assert stats.state_bytes == min(nsteps, 2) * N * 8
    # a snapshot holds the array read and the other's two boundary cells; the newest is whole until its
    # step has run (keeping both arrays: held * 2 * N * 8)
    held = min(snapshots, nsteps - 1)
    assert stats.peak_bytes <= max(held - 1, 0) * (N + 2) * 8 + 2 * N * 8


def test_unread_overwrites_on_disk_and_in_while_loops(tmp_path):
    want, _ = _grads(_stencil_step, 30, None)
    got, stats = _grads(_stencil_step, 30, 3, storage="disk", directory=str(tmp_path))
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-14)
    assert stats.peak_bytes <= 2 * (N + 2) * 8 + 2 * N * 8
    assert os.listdir(tmp_path) == []

    def f(u, v):
        count = [0]

        def more(u, v):
            count[0] += 1
            return count[0] <= 30

        checkpoint.while_loop(more, _stencil_step, u, v, snapshots=3)

    u, v = 0.5 + 0.4 * np.sin(np.linspace(0.0, 6.0, N)), np.linspace(-0.3, 0.2, N)
    du, dv = np.linspace(1.0, 2.0, N), np.linspace(-1.0, 0.5, N)
    pad.autodiff(f, pad.Dup(u, du), pad.Dup(v, dv))
    for a, b in zip((u, v, du, dv), want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-14)


def _reads_then_overwrites(t, u, v):
    """Reads ``dst`` (into ``src``) before overwriting all of it: ``dst`` must stay in the snapshot."""
    src, dst = (u, v) if t % 2 == 0 else (v, u)
    kops.axpy(0.5, dst, src)
    pad.launch(_scaled, src.shape[0], 0.9, src, dst)


def _opaque_read_then_overwrites(t, u, v):
    """An operation pad cannot see into (``npops.axpy``) reads ``dst`` before a launch overwrites it."""
    src, dst = (u, v) if t % 2 == 0 else (v, u)
    axpy(0.5, dst, src)
    pad.launch(_scaled, src.shape[0], 0.9, src, dst)


def _overwrites_then_reads(t, u, v):
    """Overwrites ``dst`` unread, then reads it: the snapshot need not hold ``dst``."""
    src, dst = (u, v) if t % 2 == 0 else (v, u)
    pad.launch(_scaled, src.shape[0], 0.9, src, dst)
    kops.axpy(0.5, dst, src)


@pytest.mark.parametrize(
    "stepper,arrays",
    [(_reads_then_overwrites, 2), (_opaque_read_then_overwrites, 2), (_overwrites_then_reads, 1)],
)
def test_an_array_read_before_it_is_overwritten_stays_in_the_snapshot(stepper, arrays):
    """A snapshot left without an array the step reads would restore NaN there: the gradients check it."""
    want, _ = _grads(stepper, 20, None)
    got, stats = _grads(stepper, 20, 3)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-14)
    assert stats.peak_bytes == 3 * arrays * N * 8  # three snapshots, each of the `arrays` its step reads


def test_a_read_pad_cannot_see_shows_as_nan_not_as_a_wrong_gradient():
    def sneaky(t, u, v):
        src, dst = (u, v) if t % 2 == 0 else (v, u)
        c = 0.9 + 1e-3 * float(np.max(dst))  # plain NumPy reads dst, then the launch overwrites it unread
        pad.launch(_scaled, src.shape[0], c, src, dst)

    want, _ = _grads(sneaky, 20, None)
    assert np.isfinite(want[2]).all()
    got, _ = _grads(sneaky, 20, 3)
    assert np.isnan(got[2]).all()
    np.testing.assert_allclose(got[0], want[0], rtol=1e-13)  # the primal arrays are put back as found


def test_keep_everything_loop_records_every_step_once():
    _, stats = _run(7, None)
    assert (stats.steps, stats.recomputed) == (7, 0)


def test_snapshot_memory_is_bounded():
    """Traced peak memory with 3 snapshots is a fraction of keeping every step."""
    big = 20_000

    def peak(snapshots):
        u, v, w = np.linspace(0.0, 1.0, big), np.zeros(big), np.zeros(big)
        tracemalloc.start()
        pad.autodiff(
            lambda u, v, w: checkpoint.loop(step, 60, u, v, w, snapshots=snapshots),
            pad.Dup(u, np.zeros(big)),
            pad.Dup(v, np.ones(big)),
            pad.Dup(w, np.ones(big)),
        )
        result = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return result

    state = 3 * big * 8
    peak(3)  # loads the compiled copies and fills first: numba's loading is traced too, and is not the loop's
    kept = peak(3)
    assert kept < (3 + 4) * state  # 3 snapshots, the final state put back, one step's tape and temporaries
    assert peak(None) > 3 * kept


def test_disk_snapshots_match_and_are_removed(tmp_path):
    got, stats = _run(50, 3, storage="disk", directory=str(tmp_path))
    for a, b in zip(got, _expected(50), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-14)
    assert stats.peak_bytes <= 3 * stats.state_bytes
    assert os.listdir(tmp_path) == []


def test_disk_snapshots_are_removed_after_an_error(tmp_path):
    calls = [0]

    def flaky(t, u, v, w):
        calls[0] += 1
        if calls[0] == 60:  # fails while recomputing in the reverse pass
            raise FloatingPointError("step failed")
        step(t, u, v, w)

    seen = []

    def f(u, v, w):
        checkpoint.loop(flaky, 50, u, v, w, snapshots=3, storage="disk", directory=str(tmp_path))
        seen.extend(os.listdir(tmp_path))

    with pytest.raises(FloatingPointError):
        pad.autodiff(f, *(pad.Dup(np.ones(N), np.ones(N)) for _ in range(3)))
    assert seen and os.listdir(tmp_path) == []

    def g(u, v, w):  # fails in the forward pass
        checkpoint.loop(
            lambda t, *a: flaky(t + 100, *a),
            50,
            u,
            v,
            w,
            snapshots=3,
            storage="disk",
            directory=str(tmp_path),
        )

    calls[0] = 0
    with pytest.raises(FloatingPointError):
        pad.autodiff(g, *(pad.Dup(np.ones(N), np.ones(N)) for _ in range(3)))
    assert os.listdir(tmp_path) == []

    def h(u, v, w):  # the loop ends, then something after it fails: its reverse pass never runs
        checkpoint.loop(step, 20, u, v, w, snapshots=3, storage="disk", directory=str(tmp_path))
        raise KeyError("later failure")

    with pytest.raises(KeyError):
        pad.autodiff(h, *(pad.Dup(np.ones(N), np.ones(N)) for _ in range(3)))
    gc.collect()
    assert os.listdir(tmp_path) == []


def test_a_disk_that_fills_with_snapshots_is_a_save_error_and_leaves_nothing(tmp_path, monkeypatch):
    """The fifth snapshot file finds the disk full: ``SaveError`` (this process's alone, not agreed over
    ranks) naming the folder and the cause, and the snapshot files written before it are removed."""
    written = [0]
    real = np.save

    def filling(path, a, *args, **kwargs):
        written[0] += 1
        if written[0] == 5:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, a, *args, **kwargs)

    monkeypatch.setattr(np, "save", filling)
    with pytest.raises(
        checkpoint.SaveError, match=r"writing a snapshot to .* failed: No space left"
    ) as failed:
        _run(50, 3, storage="disk", directory=str(tmp_path))
    assert failed.value.errno == errno.ENOSPC and not failed.value.agreed
    assert written[0] == 5 and os.listdir(tmp_path) == []


def test_while_loop_disk(tmp_path):
    got, _ = _run(20, 2, storage="disk", directory=str(tmp_path), while_=True)
    for a, b in zip(got, _expected(20), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-14)
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------------------------- other modes
def test_outside_autodiff_and_in_fwddiff_it_is_a_plain_loop():
    u1, v1, w1 = np.linspace(0.1, 1.0, N), np.zeros(N), np.zeros(N)
    u2, v2, w2 = u1.copy(), v1.copy(), w1.copy()
    checkpoint.loop(step, 9, u1, v1, w1, snapshots=2)
    for t in range(9):
        step(t, u2, v2, w2)
    np.testing.assert_array_equal(w1, w2)

    # forward mode against reverse mode (dot-product test) through the generic checker
    pad.check_grad(
        lambda u, v, w: checkpoint.loop(step, 9, u, v, w, snapshots=2),
        pad.Dup(np.linspace(0.1, 1.0, N), np.zeros(N)),
        pad.Dup(np.zeros(N), np.zeros(N)),
        pad.Dup(np.zeros(N), np.zeros(N)),
    )


def test_segment_matches_plain_gradient():
    def nine(u, v, w):
        for t in range(9):
            step(t, u, v, w)

    def grads(f):
        u, v, w = np.linspace(0.1, 1.0, N), np.zeros(N), np.zeros(N)
        du, dv, dw = np.zeros(N), np.ones(N), np.ones(N)
        pad.autodiff(f, pad.Dup(u, du), pad.Dup(v, dv), pad.Dup(w, dw))
        return du, dv, dw

    def seg(u, v, w):
        checkpoint.segment(nine, u, v, w)
        axpy(1.0, v, u)  # overwrites an input of the segment after it ran

    def plain(u, v, w):
        nine(u, v, w)
        axpy(1.0, v, u)

    for a, b in zip(grads(seg), grads(plain), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13)


def test_checkpointed_step_that_spawns_tasks_of_launches():
    def tstep(t, x, ys, out):
        ts = [tasks.spawn(kops.sin_to, x, y) for y in ys]
        tasks.wait_all(ts)
        for y in ys:
            kops.axpy(0.1, y, out)
        kops.axpy(0.2, out, x)

    def grads(snapshots):
        x, ys, out = np.linspace(0.1, 1.0, N), [np.zeros(N) for _ in range(3)], np.zeros(N)
        dx, dout = np.zeros(N), np.ones(N)
        pad.autodiff(
            lambda x, y0, y1, y2, out: checkpoint.loop(tstep, 12, x, [y0, y1, y2], out, snapshots=snapshots),
            pad.Dup(x, dx),
            *(pad.Dup(y, np.zeros(N)) for y in ys),
            pad.Dup(out, dout),
        )
        return dx

    np.testing.assert_allclose(grads(2), grads(None), rtol=1e-13)


# ---------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("bad", [0, -1, 2.5])
def test_snapshots_must_be_at_least_one(bad):
    with pytest.raises(ValueError, match="snapshots must be None or an integer >= 1"):
        checkpoint.loop(step, 3, np.ones(N), np.ones(N), np.ones(N), snapshots=bad)
    with pytest.raises(ValueError, match="snapshots"):
        checkpoint.while_loop(lambda *a: False, step, snapshots=bad)


def test_step_that_changes_shapes_is_refused():
    state = {"u": np.ones(N), "v": np.zeros(N)}

    def grow(t, s):
        s["u"] = np.concatenate([s["u"], [1.0]])
        sin_to(s["u"][:N], s["v"])

    with pytest.raises(ValueError, match=r"changed the shape of args\[0\]\['u'\]"):
        pad.autodiff(
            lambda u, v: checkpoint.loop(grow, 4, {"u": u, "v": v}, snapshots=2),
            *(pad.Dup(a, np.ones(N)) for a in state.values()),
        )

    def replace(t, s):
        s["v"] = np.zeros(N)
        sin_to(s["u"], s["v"])

    with pytest.raises(ValueError, match=r"replaced .* by a new array"):
        pad.autodiff(
            lambda u, v: checkpoint.loop(replace, 4, {"u": u, "v": v}, snapshots=2),
            *(pad.Dup(np.ones(N), np.ones(N)) for _ in range(2)),
        )


def test_while_condition_reading_a_shadow_is_refused():
    u, du = np.linspace(0.1, 1.0, N), np.ones(N)

    def f(u, v, w):
        checkpoint.while_loop(lambda u, v, w: du[0] < 5.0, step, u, v, w, snapshots=2)

    with pytest.raises(ValueError, match="condition can read du, a shadow array"):
        pad.autodiff(f, pad.Dup(u, du), pad.Dup(np.zeros(N), np.ones(N)), pad.Dup(np.zeros(N), np.ones(N)))


def test_segment_returning_an_array_is_refused():
    with pytest.raises(TypeError, match="update its arguments in place"):
        pad.autodiff(lambda u: checkpoint.segment(lambda u: u * 2.0, u), pad.Dup(np.ones(N), np.ones(N)))


def test_bad_storage_is_refused():
    with pytest.raises(ValueError, match="storage"):
        checkpoint.loop(step, 3, snapshots=2, storage="tape")


def test_writes_of_a_concurrent_task_are_not_loop_state():
    import threading

    go, done = threading.Event(), threading.Event()

    def other(x, q):
        go.wait(10)
        sin_to(x, q)  # written while the loop runs, by a task the loop did not spawn
        done.set()

    def lstep(t, u, v, w):
        if t == 0:
            go.set()
            done.wait(10)
        step(t, u, v, w)

    stats = checkpoint.Stats()

    def f(u, v, w, x, q):
        t = tasks.spawn(other, x, q)
        checkpoint.loop(lstep, 7, u, v, w, snapshots=2, stats=stats)
        t.wait()

    pad.autodiff(f, *(pad.Dup(np.full(N, 0.5), np.ones(N)) for _ in range(5)))
    assert stats.state_bytes == 3 * N * 8


def test_temporaries_of_a_step_do_not_accumulate():
    """A step's temporary (and its shadow) die with the step, in the recomputations too."""
    big = 20_000

    def tstep(t, u):
        tmp = np.empty_like(u)
        sin_to(u, tmp)
        axpy(0.5, tmp, u)

    u, du = np.linspace(0.0, 1.0, big), np.ones(big)
    # compiled first: the compiler's own allocations (the test alone in a fresh process) are not the step's
    pad.autodiff(lambda u: checkpoint.loop(tstep, 2, u, snapshots=1), pad.Dup(u.copy(), du.copy()))
    stats = checkpoint.Stats()
    tracemalloc.start()
    pad.autodiff(lambda u: checkpoint.loop(tstep, 80, u, snapshots=3, stats=stats), pad.Dup(u, du))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 * big * 8  # 3 snapshots, the final state, one step's tape and a few temporaries
    assert stats.snapshots_peak == 3


@pytest.mark.parametrize("inner,outer", [(None, 2), (2, None), (2, 3)])
def test_nested_checkpointed_loops(inner, outer):
    def grads(inner, outer):
        u, v, w = np.linspace(0.1, 1.0, N), np.zeros(N), np.zeros(N)
        du, dv, dw = np.zeros(N), np.ones(N), np.ones(N)

        def block(b, u, v, w):
            checkpoint.loop(lambda t, *a: step(4 * b + t, *a), 4, u, v, w, snapshots=inner)

        pad.autodiff(
            lambda u, v, w: checkpoint.loop(block, 5, u, v, w, snapshots=outer),
            *map(pad.Dup, (u, v, w), (du, dv, dw)),
        )
        return du, dv, dw

    for a, b in zip(grads(inner, outer), grads(None, None), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13)
