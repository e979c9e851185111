"""The CUDA target's own behaviour: races, tapes, launches, and errors that name the cause.

On a real GPU with CuPy arrays, or on numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``); skips otherwise.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pytest

import pad
from pad import arrays
from pad.parallel import _run
from tests.gpu.test_corpus_cuda import SIMULATED, _gpu_available, device
from tests.unit.test_checkpoint_replay import check_segments
from tests.unit.test_checkpoint_replay import gradient as loop_gradient
from tests.unit.test_graph import check_replayed_gradient

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _gpu_available(), reason="no GPU and NUMBA_ENABLE_CUDASIM is not 1"),
]
N = 4096 if SIMULATED else 1 << 20  # large enough on a GPU that racing threads would collide


@pad.kernel
def smooth(i, x, y):
    if i == 0 or i == x.shape[0] - 1:
        y[i] = x[i]
    else:
        y[i] = 0.25 * x[i - 1] + 0.5 * x[i] + 0.25 * x[i + 1]


@pad.kernel
def lopsided(i, x, y):
    if i >= 2 and i < x.shape[0] - 1:
        y[i] = 0.3 * x[i - 2] * x[i - 2] - 0.7 * x[i + 1]
    else:
        y[i] = x[i]


@pad.kernel
def series(i, m, x, y):
    v = x[i]
    t = 0.0
    for _k in range(m[i]):  # a data-dependent trip count: the tape's depth is bounded by a first kernel
        v = math.sin(v) + 0.5 * v
        if v > 0.3:
            t = t + v * v
    y[i] = t


@pad.kernel
def series_of_width(i, w, x, y):
    v = x[i]
    t = 0.0
    for _k in range(w.shape[0]):  # a trip count the shapes give: the tape's depth follows from them
        v = math.sin(v) + 0.5 * v
        if v > 0.3:
            t = t + v * v
    y[i] = t


@pad.kernel
def total(i, x, s):
    s[0] += x[i] * x[i]


@pad.kernel
def scaled(i, c, x, y):
    if abs(x[i]) > 0.1:  # the adds to dc[1] happen in a branch, not on every thread
        y[i] = c[1] * x[i] * x[i] - c[0] * x[i]
    else:
        y[i] = c[1] * x[i]


@pad.kernel
def clamped(i, x, y):
    v = x[i]
    if v > 0.5:
        v = 0.5 - v * v
    y[i] = v * x[i]


@pad.kernel
def advance(i, f, xv):
    """A few-iteration loop that loads what it stores (LULESH's node update): its adjoint would tape it."""
    for axis in range(3):
        v = xv[3 + axis, i] + f[axis, i] * f[axis, i]
        if abs(v) < 0.1:
            v = 0.0
        xv[3 + axis, i] = v
        xv[axis, i] = xv[axis, i] + v * v


def gradient(program, args, seeds):
    """Shadows (on the host) after one autodiff of ``program`` with the given output seeds."""
    dups = [pad.Dup(a, arrays.like(a, s)) for a, s in zip(args, seeds, strict=True)]
    pad.autodiff(program, *dups)
    return [arrays.to_host(d.shadow) for d in dups]


def test_owned_and_shared_accumulations_do_not_race():
    """Thread i adds to dx[i] while threads i-1 and i+1 add to it too: all adds must be atomic."""
    rng = np.random.default_rng(1)
    x, seed = rng.uniform(size=N), rng.uniform(size=N)

    def run(xp_x, xp_y):
        pad.launch(smooth, xp_x.shape[0], xp_x, xp_y)

    cpu = gradient(run, [x.copy(), np.zeros(N)], [np.zeros(N), seed])
    for _ in range(3):
        gpu = gradient(run, [device(x), device(np.zeros(N))], [np.zeros(N), seed])
        np.testing.assert_allclose(gpu[0], cpu[0], rtol=1e-12, atol=1e-14)


def test_adjoint_of_a_lopsided_stencil_sums_its_tile_into_the_shadow_it_was_given():
    """dx[i - 2] and dx[i + 1] (no dx[i]) are summed per block in shared memory and added once to a
    shadow that already holds values: block-interior elements by plain adds, the halos atomically."""
    n = 1000  # not a multiple of the block: a partial last block
    rng = np.random.default_rng(4)
    x, seed, dx = rng.uniform(size=n), rng.uniform(size=n), rng.uniform(size=n)

    def run(xp_x, xp_y):
        pad.launch(lopsided, xp_x.shape[0], xp_x, xp_y)

    source = pad.show(
        lopsided, "adjoint", pad.Dup(x, dx), pad.Dup(x, seed), target="cuda", file=io.StringIO()
    )
    assert "cuda.shared.array" in source
    cpu = [pad.Dup(x.copy(), dx.copy()), pad.Dup(np.zeros(n), seed.copy())]
    pad.autodiff(run, *cpu)
    gpu = [pad.Dup(device(x), device(dx)), pad.Dup(device(np.zeros(n)), device(seed))]
    pad.autodiff(run, *gpu)
    np.testing.assert_allclose(arrays.to_host(gpu[0].shadow), cpu[0].shadow, rtol=1e-13, atol=1e-15)
    assert not np.allclose(cpu[0].shadow, dx)
    # y is overwritten: its seed is consumed, zeroed after the kernel read it (not in the kernel).
    assert not np.any(cpu[1].shadow) and not np.any(arrays.to_host(gpu[1].shadow))
    assert "_b_y[i] = 0" not in source


def test_sum_into_one_element_matches_cpu():
    rng = np.random.default_rng(2)
    x = rng.uniform(size=N)
    s = device(np.zeros(1))
    pad.launch(total, N, device(x), s)
    assert arrays.to_host(s)[0] == pytest.approx(float(x @ x), rel=1e-12)


def test_data_dependent_tape_is_sized_reported_and_bounded(monkeypatch):
    from pad.parallel import gpu

    rng = np.random.default_rng(3)
    n = 512
    m = rng.integers(0, 9, n)
    x = rng.uniform(-1, 1, n)

    def run(x_, y_):
        pad.launch(series, n, arrays.like(x_, m, np.int64), x_, y_)

    pad.check_grad(
        run, pad.Dup(device(x), device(np.zeros(n))), pad.Dup(device(np.zeros(n)), device(np.zeros(n)))
    )
    cpu = gradient(
        lambda a, b: pad.launch(series, n, m, a, b), [x.copy(), np.zeros(n)], [np.zeros(n), np.ones(n)]
    )
    gpu_ = gradient(run, [device(x), device(np.zeros(n))], [np.zeros(n), np.ones(n)])
    np.testing.assert_allclose(gpu_[0], cpu[0], rtol=1e-10, atol=1e-12)
    assert 0 < gpu.stats["tape_bytes"] <= 8 * n * (2 * 8 + 8)  # at most a few values per iteration
    monkeypatch.setenv("PAD_GPU_TAPE_LIMIT", "64")
    with pytest.raises(MemoryError, match=r"tape of .* over the limit .*PAD_GPU_TAPE_LIMIT"):
        gradient(run, [device(x), device(np.zeros(n))], [np.zeros(n), np.ones(n)])


def test_adds_at_a_constant_index_are_summed_per_block_and_match_cpu():
    """dc[0] and dc[1], which every thread adds to, are summed per block and added once per block (not one
    atomic per warp queueing on one address); n is not a multiple of the block."""
    n = 1000
    rng = np.random.default_rng(5)
    c, x, seed = np.array([0.7, -1.3]), rng.uniform(-1, 1, n), rng.uniform(size=n)

    def run(c_, x_, y_):
        pad.launch(scaled, n, c_, x_, y_)

    source = pad.show(
        scaled, "adjoint", pad.Dup(c, c), pad.Dup(x, x), pad.Dup(x, seed), target="cuda", file=io.StringIO()
    )
    assert "cuda.atomic.add(_b_c, 0, _sum[" in source and "cuda.atomic.add(_b_c, 1, _sum[" in source
    assert "warp_sum(" not in source
    cpu = gradient(run, [c.copy(), x.copy(), np.zeros(n)], [np.zeros(2), np.zeros(n), seed])
    gpu = gradient(run, [device(c), device(x), device(np.zeros(n))], [np.zeros(2), np.zeros(n), seed])
    np.testing.assert_allclose(gpu[0], cpu[0], rtol=1e-12)
    np.testing.assert_allclose(gpu[1], cpu[1], rtol=1e-12, atol=1e-15)
    big = np.abs(x) > 0.1
    assert gpu[0][0] == pytest.approx(-float(seed[big] @ x[big]), rel=1e-12)
    pad.check_grad(run, pad.Dup(device(c), device(np.zeros(2))), pad.Dup(device(x), device(np.zeros(n))),
                   pad.Dup(device(np.zeros(n)), device(np.zeros(n))))  # fmt: skip


def test_a_small_taped_loop_is_unrolled_into_registers():
    """The CUDA adjoint of a 3-iteration loop that loads what it stores saves its values in variables (the
    loop unrolled), not on the global tape; gradients match the CPU's and finite differences."""
    n = 200
    rng = np.random.default_rng(9)
    f, xv = rng.uniform(-1, 1, (3, n)), rng.uniform(-1, 1, (6, n))
    source = pad.show(advance, "adjoint", pad.Dup(f, f), pad.Dup(xv, xv), target="cuda", file=io.StringIO())
    assert "_tape[" not in source and "for axis" not in source

    def run(f_, xv_):
        pad.launch(advance, n, f_, xv_)

    seeds = [np.zeros((3, n)), rng.uniform(size=(6, n))]
    cpu = gradient(run, [f.copy(), xv.copy()], seeds)
    gpu = gradient(run, [device(f), device(xv)], seeds)
    for g, c in zip(gpu, cpu, strict=True):
        np.testing.assert_allclose(g, c, rtol=1e-12, atol=1e-15)
    pad.check_grad(
        run, pad.Dup(device(f), device(np.zeros((3, n)))), pad.Dup(device(xv), device(np.zeros((6, n))))
    )


def test_a_fixed_size_tape_is_not_checked_for_overflow(monkeypatch):
    """An adjoint whose tape size is known when it is compiled cannot overflow it: the reverse pass reads
    nothing back from the device (it would wait for the GPU), unlike one whose depth a kernel bounds."""
    n = 300
    x = np.linspace(0.0, 1.0, n)
    reads = []
    real = arrays.to_host
    monkeypatch.setattr(arrays, "to_host", lambda a: reads.append(a) or real(a))
    dx, dy = device(np.zeros(n)), device(np.ones(n))
    pad.autodiff(
        lambda a, b: pad.launch(clamped, n, a, b), pad.Dup(device(x), dx), pad.Dup(device(np.zeros(n)), dy)
    )
    assert not reads
    want = np.where(x > 0.5, 0.5 - 3.0 * x * x, 2.0 * x)
    np.testing.assert_allclose(real(dx), want, rtol=1e-12, atol=1e-15)
    m = np.full(n, 3)
    pad.autodiff(
        lambda a, b: pad.launch(series, n, arrays.like(a, m, np.int64), a, b),
        pad.Dup(device(x), device(np.zeros(n))),
        pad.Dup(device(np.zeros(n)), device(np.ones(n))),
    )
    assert reads  # the depth bound, and the overflow flag


def test_mixing_host_and_device_arrays_names_the_arguments():
    with pytest.raises(TypeError, match=r"argument 1 in GPU 0 memory .* argument 2 in host memory"):
        pad.launch(smooth, 8, device(np.zeros(8)), np.zeros(8))


def test_shadow_in_the_wrong_memory_is_refused():
    with pytest.raises(TypeError, match=r"the array is in GPU 0 memory .* but its shadow in host memory"):
        pad.autodiff(lambda a, b: None, pad.Dup(device(np.zeros(4)), np.zeros(4)), device(np.zeros(4)))


def test_a_host_and_a_device_array_never_share_memory():
    """The tape asks before each write whether a kept value aliases the target; a kept device array and a host
    target (pad.mpi stages device buffers through the host) must answer no, not fail inside CuPy."""
    host, dev = np.zeros(8), device(np.zeros(8))
    assert not arrays.may_share_memory(dev, host) and not arrays.may_share_memory(host, dev)
    assert arrays.may_share_memory(dev, dev[2:5]) and not arrays.may_share_memory(dev[:4], dev[4:])
    assert arrays.may_share_memory(host, host[3:]) and not arrays.may_share_memory(host, np.zeros(8))


def test_empty_launch_does_nothing():
    y = device(np.full(4, 7.0))
    pad.launch(smooth, 0, device(np.zeros(4)), y)
    assert (arrays.to_host(y) == 7.0).all()


@pytest.mark.skipif(SIMULATED, reason="direct launches are a real-GPU path")
def test_repeated_launches_go_direct_and_agree():
    from pad.parallel import gpu

    x = device(np.random.default_rng(4).uniform(size=N))
    outs = []
    for _ in range(3):
        y = device(np.zeros(N))
        pad.launch(smooth, N, x, y)
        outs.append(arrays.to_host(y))
    assert "direct_launch_error" not in gpu.stats
    np.testing.assert_array_equal(outs[1], outs[0])
    np.testing.assert_array_equal(outs[2], outs[0])


@pad.func
def allocating_helper(v):
    tmp = np.zeros(3)
    return v + tmp[0]


@pad.kernel
def calls_allocating_helper(i, x):
    x[i] = allocating_helper(x[i])


def test_helper_that_allocates_is_refused_with_its_line():
    with pytest.raises(pad.KernelSyntaxError, match=r"test_cuda.py:\d+.*np.zeros"):
        pad.launch(calls_allocating_helper, 4, device(np.ones(4)))


@pad.kernel
def pair_sums(i, x, q, e):
    total = 1.0
    for k in range(1, 3):  # the inner loop adds to what the outer one carries
        for j in range(x.shape[0]):
            d = x[i] - x[j]
            total += k * q[j] * d * d
    e[i] = total


@pad.kernel
def sum_and_last(i, x, e):
    total = 0.0
    last = 0.0
    for j in range(i, x.shape[0]):
        total += x[j]
        last = x[j]  # read after the loop: the loop cannot be shared
    e[i] = total + last


@pad.kernel
def cut_off_pairs(i, x, q, e):
    total = 0.0
    for j in range(x.shape[0]):
        d = x[i] - x[j]
        r2 = d * d + 0.01
        if r2 < 0.25:  # the adjoint recomputes d and r2 and branches again: one branch once merged
            total += q[i] * q[j] / math.sqrt(r2)
    e[i] = total


def test_adjoint_of_a_loop_with_a_cut_off_shares_its_loop_and_matches_differences():
    """The adjoint recomputes the loop's forward branch beside its reverse one; merged, nothing the forward
    branch sets looks live around the loop, so the lanes of a group still share the loop."""
    rng = np.random.default_rng(12)
    x, q = rng.uniform(-1, 1, 60), rng.uniform(-1, 1, 60)
    assert cut_off_pairs.variant((x, q, x), "adjoint", (True, True, True), target="cuda").shares_loops
    pad.check_grad(
        lambda x, q, e: pad.launch(cut_off_pairs, 60, x, q, e),
        pad.Dup(device(x), device(np.zeros(60))),
        pad.Dup(device(q), device(np.zeros(60))),
        pad.Dup(device(np.zeros(60)), device(np.zeros(60))),
    )


def test_launch_of_few_indices_shares_its_sum_loops_and_agrees_with_numpy():
    """On a GPU a group of lanes shares each launch index's inner sum loop (one lane on the simulator)."""
    rng = np.random.default_rng(11)
    x, q = rng.uniform(-1, 1, 3000), rng.uniform(-1, 1, 3000)
    assert pair_sums.variant((x, q, x), "primal", target="cuda").shares_loops
    assert not sum_and_last.variant((x, x), "primal", target="cuda").shares_loops
    for n in (1, 7, 640):
        e = device(np.zeros(n))
        pad.launch(pair_sums, n, device(x), device(q), e)
        expected = 1 + 3 * ((x[:n, None] - x[None, :]) ** 2 * q[None, :]).sum(axis=1)
        np.testing.assert_allclose(arrays.to_host(e), expected, rtol=1e-12, atol=1e-12)
        e = device(np.zeros(n))
        pad.launch(sum_and_last, n, device(x), e)
        expected = np.array([x[i:].sum() + x[-1] for i in range(n)])
        np.testing.assert_allclose(arrays.to_host(e), expected, rtol=1e-12, atol=1e-12)
    dx, dq = np.zeros(3000), np.zeros(3000)
    pad.check_grad(
        lambda x, q, e: pad.launch(pair_sums, 5, x, q, e),
        pad.Dup(device(x[:40].copy()), device(dx[:40].copy())),
        pad.Dup(device(q[:40].copy()), device(dq[:40].copy())),
        pad.Dup(device(np.zeros(5)), device(np.zeros(5))),
    )


@pad.kernel
def pair_energy_local(i, x, q, e):
    w = pad.local_array(1)  # each lane keeps its own copy, stored outside the shared loop
    w[0] = x[i]
    total = 0.0
    for _k in range(2):
        w[0] = math.sin(w[0]) + 0.5 * w[0]  # overwritten: the adjoint saves it on the tape
        xi = w[0]
        for j in range(x.shape[0]):  # its adjoint adds into every partner's shadow
            d = xi - x[j]
            total += q[j] * d * d
    e[i] = total


@pad.kernel
def pair_energy_tape(i, x, q, e):
    xi = x[i]
    total = 0.0
    for _k in range(2):
        xi = math.sin(xi) + 0.5 * xi  # overwritten: the adjoint saves it on the tape
        for j in range(x.shape[0]):  # its adjoint adds into every partner's shadow
            d = xi - x[j]
            total += q[j] * d * d
    e[i] = total


@pytest.mark.parametrize("kernel", [pair_energy_tape, pair_energy_local], ids=["scalar", "local array"])
@pytest.mark.parametrize("fuse", [False, True])
def test_adjoint_of_few_indices_shares_its_sum_loops_and_agrees_with_cpu(kernel, fuse):
    """Adjoint and fused kernels share their order-free reverse loops among a group's lanes too (a tape
    column per lane); on a GPU the lanes at one place in their groups add into the partners' shadows
    together. The gradient equals the CPU's."""
    rng = np.random.default_rng(12)
    m = 40 if SIMULATED else 700  # partners (the simulator runs each thread's loops in Python)
    x, q, seed = rng.uniform(-1, 1, m), rng.uniform(-1, 1, m), rng.uniform(0.5, 1.5, 9)
    mode = "fused" if fuse else "adjoint"
    assert kernel.variant((x, q, seed), mode, (True, True, True), "cuda").shares_loops

    def program(x, q, e):
        pad.launch(kernel, 9, x, q, e)

    def run(convert):
        dx, dq, e = convert(np.zeros(m)), convert(np.zeros(m)), convert(np.zeros(9))
        pad.autodiff(
            program, pad.Dup(convert(x), dx), pad.Dup(convert(q), dq), pad.Dup(e, convert(seed)), fuse=fuse
        )
        return [arrays.to_host(a) for a in (dx, dq, e)]

    for got, want in zip(run(device), run(np.asarray), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)


@pad.kernel
def _squares(i, x, y):
    y[i] = x[i] * x[i]


@pad.kernel
def _scaled(i, y, out):
    out[i] = 3.0 * y[i] * y[i]


@pytest.mark.parametrize("op", ["SUM", "MIN"])
def test_one_rank_collectives_on_the_device_are_differentiated_copies(op, monkeypatch):
    """On a one-rank communicator, Allreduce of device arrays is a device copy (no trip through the host),
    inside autodiff too: its gradient equals the host run's, which goes through mpi4py."""
    import pad.mpi
    from pad.mpi import _core

    def staged(*args):
        raise AssertionError("a one-rank collective went through the host")

    comm = pad.mpi.Comm(pad.mpi.COMM_WORLD.mpi.Split(pad.mpi.COMM_WORLD.rank))
    n = 64

    def program(x, y, z, out):
        pad.launch(_squares, n, x, y)
        comm.Allreduce(y, z, getattr(pad.mpi, op))
        pad.launch(_scaled, n, z, out)

    grads = []
    for put in (lambda a: a, device):
        if put is device:
            monkeypatch.setattr(_core, "_staged", staged)
        x = np.linspace(0.5, 1.5, n)
        arrays_ = [put(x), put(np.zeros(n)), put(np.zeros(n)), put(np.zeros(n))]
        shadows = [put(np.zeros(n)), put(np.zeros(n)), put(np.zeros(n)), put(np.ones(n))]
        pad.autodiff(program, *(pad.Dup(a, d) for a, d in zip(arrays_, shadows, strict=True)))
        grads.append((arrays.to_host(arrays_[3]), arrays.to_host(shadows[0])))
    np.testing.assert_allclose(grads[1][0], grads[0][0], rtol=1e-14)
    np.testing.assert_allclose(grads[1][1], grads[0][1], rtol=1e-14)
    np.testing.assert_allclose(grads[0][1], 12.0 * np.linspace(0.5, 1.5, n) ** 3, rtol=1e-14)


@pad.kernel
def shifted(i, x, y):
    y[i] = 2.0 * x[i + 1]


@pad.kernel
def gathered(i, idx, x, y):
    y[i] = 3.0 * x[idx[i]]


@pytest.mark.skipif(not SIMULATED, reason="PAD_DEBUG checks CUDA kernels on numba's simulator only")
def test_debug_checks_every_access_on_the_simulator():
    """The same message as on CPU threads: kernel, line, array, index, shape, launch index."""
    x, y, dx, dy = device(np.ones(4)), device(np.zeros(4)), device(np.zeros(4)), device(np.ones(4))
    idx = device(np.array([0, 1, 2, 7]))
    with pad.debug():
        with pytest.raises(
            IndexError, match=r"in shifted \(primal\), launch index 3: index \(4,\) is out of"
        ):
            pad.launch(shifted, 4, x, y)
        adjoint = gathered.variant((idx, x, y), "adjoint", (False, True, True), target="cuda")
    with pytest.raises(
        IndexError, match=r"in gathered \(adjoint\), launch index 3: index \(7,\) is out of range"
    ):
        _run(adjoint, 4, (idx, x, y), [dx, dy], [None, dx, dy])


def test_array_operations_on_the_device():
    """pad.copy/scale/axpy/fill are launches: they run and are differentiated where their arrays live."""
    rng = np.random.default_rng(5)

    def program(a, x, y):
        pad.axpy(a, x, y)
        pad.scale(y, a)
        pad.copy(x, y)
        pad.fill(y, 0.5)
        pad.axpy(2.0, x, y)

    x, y = rng.uniform(0.5, 1.5, (3, 4)), rng.uniform(0.5, 1.5, (3, 4))
    pad.check_grad(
        program,
        pad.Active(1.3),
        pad.Dup(device(x), device(np.zeros_like(x))),
        pad.Dup(device(y), device(np.zeros_like(y))),
    )


def test_a_differentiated_step_replays_on_the_device():
    """On a GPU the record is one CUDA graph: the adjoints' tapes are allocated while it is captured."""
    check_replayed_gradient(device, arrays.to_host)


@pytest.mark.skipif(
    SIMULATED, reason="a batch of GPU ranges is CuPy's; the simulator's arrays are copied one by one"
)
def test_segments_copy_gpu_ranges_into_one_buffer_and_back():
    """One kernel launch gathers every range into a buffer, one scatters it back: 16-byte words, byte tails
    and an unaligned range."""
    check_segments(device, arrays.to_host, device=True)


def test_a_replayed_checkpointed_loop_on_the_device_agrees_with_the_cpu():
    """On a GPU a replayed loop keeps a whole snapshot of every step (one kernel launch each way) and
    replays its forward and adjoint steps: its gradient is the CPU's that kept every step's records (up
    to the order of the adjoint's atomic adds)."""
    want, _, _ = loop_gradient(None, memory=10**6)
    got, stats, _ = loop_gradient(lambda t: t == 0, memory=10**6, while_=True, put=device, get=arrays.to_host)
    for a, b in zip(want, got, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-12)
    if not SIMULATED:  # the simulator's numba arrays keep records
        assert not stats.records and stats.replayed >= 15 and stats.replayed_forward >= 15


def test_a_tape_depth_the_shapes_decide_is_bounded_once_per_shape(monkeypatch):
    """The depth kernel of an adjoint whose loops run as many times as the arrays' shapes say runs once for
    each launch size and shapes, not before every launch (a pass over the launch and a wait for the device);
    one whose trip counts are data runs every time. Gradients as on the CPU, and a graph step replays it."""
    from pad.parallel import gpu

    bounded: list[str] = []
    launch = gpu._launch

    def counting(dispatcher, threads, block, call):
        if dispatcher.py_func.__name__.endswith("_depth_cuda"):
            bounded.append(dispatcher.py_func.__name__)
        launch(dispatcher, threads, block, call)

    monkeypatch.setattr(gpu, "_launch", counting)
    n, x = 64, np.linspace(0.0, 1.0, 64)

    def run(width, m=None):
        w, kernel = (np.zeros(width), series_of_width) if m is None else (m, series)
        return gradient(
            lambda a, b: pad.launch(kernel, n, arrays.like(a, w, w.dtype), a, b),
            [device(x), device(np.zeros(n))], [np.zeros(n), np.ones(n)],
        )[0]  # fmt: skip

    first, again, wider = run(3), run(3), run(5)
    assert bounded == ["series_of_width_depth_cuda"] * 2  # widths 3 and 5
    np.testing.assert_array_equal(first, again)
    for w, got in ((np.zeros(3), first), (np.zeros(5), wider)):
        want = gradient(
            lambda a, b, w=w: pad.launch(series_of_width, n, w, a, b), [x.copy(), np.zeros(n)],
            [np.zeros(n), np.ones(n)],
        )[0]  # fmt: skip
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    run(3, np.full(n, 3))
    run(3, np.full(n, 3))
    assert bounded[2:] == ["series_depth_cuda"] * 2  # data decide its depth: bounded at every launch
    w, y, dx, dy = (device(np.zeros(k)) for k in (3, n, n, n))

    def step() -> None:
        pad.fill(dy, 1.0)
        pad.autodiff(
            lambda a, b: pad.launch(series_of_width, n, w, a, b), pad.Dup(device(x), dx), pad.Dup(y, dy)
        )

    g = pad.graph(step)
    g()
    reads: list[object] = []
    real = arrays.to_host
    monkeypatch.setattr(arrays, "to_host", lambda a: reads.append(a) or real(a))
    for _ in range(2):
        g()
    assert g.why is None
    assert not reads  # a bound the shapes decide holds for any data: no overflow flag to read back


def test_a_tape_sized_on_the_host_is_not_replayed():
    """An adjoint whose tape depth a first kernel bounds reads it on the host: its step runs every call."""
    m, x, y, dx, dy = (device(a) for a in (np.full(64, 3), np.linspace(0, 1, 64), *np.zeros((3, 64))))

    def step() -> None:
        pad.fill(dy, 1.0)
        pad.autodiff(lambda a, b: pad.launch(series, 64, m, a, b), pad.Dup(x, dx), pad.Dup(y, dy))

    g = pad.graph(step)
    g()
    g()
    assert g.why is not None and "sizes its tape on the host" in g.why


@pytest.mark.parametrize("case", ["gather", "helper", "branches", "early return"])
def test_adjoints_reading_their_seeds_first_agree_with_finite_differences(case):
    """The seeds and the threads' own shadow elements read at the start (``optimize.owned_loads_first``),
    next to atomic adds into shared elements, through a helper's name for the launch index, under branches,
    and past an early return (where an output has fewer elements than the launch: the simulator checks every
    index)."""
    from tests.unit.test_loads_first import (
        branch_args,
        early_return_args,
        gather_args,
        helper_args,
        k_branches,
        k_early_return,
        k_gather_scale,
        k_helper_outputs,
    )

    kernel, make = {
        "gather": (k_gather_scale, gather_args),
        "helper": (k_helper_outputs, helper_args),
        "branches": (k_branches, branch_args),
        "early return": (k_early_return, early_return_args),
    }[case]
    given, *active = make()  # an index or condition array, then the differentiated ones
    n = active[0].shape[0]
    args = (device(given), *(pad.Dup(device(a), device(np.zeros_like(a))) for a in active))
    pad.check_grad(lambda *a: pad.launch(kernel, n, *a), *args)


def test_an_adjoint_split_along_its_outputs_agrees_with_finite_differences_and_the_cpu():
    """Each piece (``pad.kernel.fission``) adds its part of the input's shadow and of the active scalar's
    adjoint, and reads and clears its own outputs' seeds alone."""
    from tests.unit.test_fission import k_two_series

    rng = np.random.default_rng(3)
    x = rng.uniform(0.1, 0.9, 64)
    args = [x, np.zeros(64), np.zeros(64)]
    variant = k_two_series.variant((0.5, *map(device, args)), "adjoint", (True,) * 4, target="cuda")
    assert len(variant.pieces) == 2
    dups = [pad.Dup(device(a), device(np.zeros(64))) for a in args]
    pad.check_grad(lambda w, *a: pad.launch(k_two_series, 64, w, *a), pad.Active(0.5), *dups)

    seeds = [np.zeros(64), rng.uniform(0.5, 1.5, 64), rng.uniform(-1.5, -0.5, 64)]

    def gradient_on(place):  # place: a copy in the device's memory or the host's
        ours = [pad.Dup(place(a), place(s)) for a, s in zip(args, seeds, strict=True)]
        w = pad.autodiff(lambda w, *a: pad.launch(k_two_series, 64, w, *a), pad.Active(0.5), *ours)
        return [w[0], *(arrays.to_host(d.shadow) for d in ours)]

    on_device, on_cpu = gradient_on(device), gradient_on(np.array)
    np.testing.assert_allclose(on_device[0], on_cpu[0], rtol=1e-12)
    for got, want in zip(on_device[1:], on_cpu[1:], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.skipif(not SIMULATED, reason="PAD_DEBUG checks kernels on the simulator alone")
def test_a_checked_adjoint_runs_whole():
    """Under PAD_DEBUG an adjoint that would split runs as one checked kernel, with its checked sites."""
    from tests.unit.test_fission import k_two_series

    x = np.linspace(0.1, 0.9, 16)
    args, active = (0.5, device(x), device(np.zeros(16)), device(np.zeros(16))), (True,) * 4
    with pad.debug():
        checked = k_two_series.variant(args, "adjoint", active, target="cuda")
    assert checked.pieces == [] and checked.sites
    assert len(k_two_series.variant(args, "adjoint", active, target="cuda").pieces) == 2


def test_a_helper_s_cuda_body_runs_and_differentiates_on_the_gpu():
    """``@pad.func(cuda=...)``: the CUDA kernel inlines the other body; values and gradients as the CPU's."""
    from tests.unit.test_target_bodies import arguments, k_weighted

    x, w, y = arguments()
    on_device = device(y)
    pad.launch(k_weighted, 16, device(x), device(w), on_device)
    pad.launch(k_weighted, 16, x, w, y)
    np.testing.assert_allclose(arrays.to_host(on_device), y, rtol=1e-14)
    pad.check_grad(
        lambda *a: pad.launch(k_weighted, 16, *a),
        pad.Dup(device(x), device(np.zeros(16))),
        pad.Dup(device(w), device(np.zeros(3))),
        pad.Dup(device(np.zeros(16)), device(np.zeros(16))),
    )


@pytest.mark.parametrize("cheap_seed", ["dense", "sparse"])
@pytest.mark.parametrize("costly_seed", ["dense", "sparse"])
def test_zero_seeds_skip_their_work_on_the_gpu(costly_seed: str, cheap_seed: str):
    """``reverse.seed_guards`` and ``iteration_guard`` in a CUDA adjoint: the gradients of every seed, as the
    analytic ones (sparse cheap seeds leave threads with no nonzero seed, which skip their iteration)."""
    from tests.unit.test_seed_guards import (
        _sparse,
        costly_seeds,
        two_outputs_gradient,
        waves_and_slope,
        x_values,
    )

    dcheap = np.linspace(0.5, 1.5, 24) if cheap_seed == "dense" else _sparse(-2.0)[::-1].copy()
    x, dcostly = x_values(), costly_seeds()[costly_seed]
    w, slope = waves_and_slope(x)
    dx, costly = two_outputs_gradient(x, dcheap, dcostly, on=device)
    np.testing.assert_allclose(costly, w, rtol=1e-13)
    np.testing.assert_allclose(dx, 3.0 * dcheap + slope * dcostly, rtol=1e-12, atol=1e-14)
