"""Results with 1 and 2 threads agree (privatized reductions make `+=` race-free)."""

from __future__ import annotations

import numba
import numpy as np
import pytest

import pad
from pad.kernel import runtime
from tests.unit.corpus import k_hex_forces, k_pairwise, k_scatter_add


def run(threads: int, program, arrays):
    numba.set_num_threads(threads)
    try:
        copies = [a.copy() for a in arrays]
        shadows = [np.linspace(0.5, 1.5, a.size).reshape(a.shape) for a in arrays]
        pad.autodiff(program, *[pad.Dup(a, s) for a, s in zip(copies, shadows, strict=True)])
        return copies, shadows
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 numba threads")
@pytest.mark.parametrize("which", ["scatter", "pairwise", "hex"])
def test_one_and_two_threads_agree(which):
    rng = np.random.default_rng(3)
    if which == "scatter":
        idx = rng.integers(0, 50, 20000)

        def program(x, y):
            pad.launch(k_scatter_add, idx.shape[0], idx, x, y)

        arrays = [rng.uniform(0.5, 1.5, 20000), np.zeros(50)]
    elif which == "pairwise":

        def program(pos, q, r, e):
            pad.launch(k_pairwise, pos.shape[0], pos, q, r, e)

        arrays = [
            rng.uniform(0, 6, (300, 2)),
            rng.uniform(-1, 1, 300),
            rng.uniform(0.3, 0.8, 300),
            np.zeros(300),
        ]
    else:
        nodes = np.array(
            [[e, e + 1, e + 5, e + 4, e + 8, e + 9, e + 13, e + 12] for e in range(3)] * 1000, np.int64
        )

        def program(x, y, z, p, fx, fy, fz):
            pad.launch(k_hex_forces, nodes.shape[0], nodes, x, y, z, p, fx, fy, fz)

        arrays = (
            [rng.uniform(0.5, 1.5, 16) for _ in range(3)]
            + [rng.uniform(0.5, 1, 3000)]
            + [np.zeros(16) for _ in range(3)]
        )
    one = run(1, program, arrays)
    two = run(2, program, arrays)
    for a, b in zip(one[0] + one[1], two[0] + two[1], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pad.kernel
def k_wide_stencil(i, x, y, z):
    n = x.shape[0]
    if i >= 3 and i < n - 3:
        y[i] = x[i - 3] * x[i + 2] - 0.5 * x[i + 3]
        z[i + 1] += x[i]


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 numba threads")
@pytest.mark.parametrize("n", [9, 13, 14, 40, 1001])
def test_stencil_adjoints_add_into_the_shadow_in_two_waves(n):
    """Reads at i + c (and adds at i + 1) need no private copy of x: chunks of at least 2 * 3 indices, every
    other one at a time, add into the shadow itself (one chunk where n is too small for four)."""
    rng = np.random.default_rng(n)
    x = rng.uniform(0.5, 1.5, n)
    program = lambda x, y, z: pad.launch(k_wide_stencil, x.shape[0], x, y, z)  # noqa: E731
    variant = k_wide_stencil.variant((x, x, x), "adjoint", (True, True, True))
    assert variant.halo == 3 and not variant.privates
    assert k_wide_stencil.variant((x, x, x), "primal").halo == 1
    one = run(1, program, [x, np.zeros(n), np.zeros(n)])
    two = run(2, program, [x, np.zeros(n), np.zeros(n)])
    for a, b in zip(one[0] + one[1], two[0] + two[1], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    dy, dz = np.linspace(0.5, 1.5, n), np.linspace(0.5, 1.5, n)
    inner = np.arange(3, n - 3)
    dx = np.linspace(0.5, 1.5, n)
    np.add.at(dx, inner - 3, dy[inner] * x[inner + 2])
    np.add.at(dx, inner + 2, dy[inner] * x[inner - 3])
    np.add.at(dx, inner + 3, -0.5 * dy[inner])
    np.add.at(dx, inner, dz[inner + 1])
    np.testing.assert_allclose(two[1][0], dx, rtol=1e-12)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 numba threads")
def test_a_kernel_body_is_compiled_once():
    """The chunks runner calls the launcher once per chunk of work and wave; numba must compile the launcher
    (the kernel's whole body) once for given arguments: the runner's chunk and wave, a uint64 prange index
    in its parallel loop, reach it as the int64s of the launch's own call. Chunks run in one sweep (the
    scatter) and in waves (the stencil's adjoint)."""
    idx, x = np.arange(64) % 7, np.linspace(0.5, 1.5, 64)
    numba.set_num_threads(2)
    try:
        for kernel, args in (
            (k_scatter_add, (idx, x, np.zeros(7))),
            (k_wide_stencil, (x, x.copy(), x.copy())),
        ):
            pad.launch(kernel, 64, *args)
            dups = [a if a.dtype.kind == "i" else pad.Dup(a.copy(), np.ones_like(a)) for a in args]
            pad.autodiff(lambda *a, kernel=kernel: pad.launch(kernel, 64, *a), *dups)
            compiled = [v for v in kernel._variants.values() if v.launcher.signatures]
            assert {"primal"} < {v.mode for v in compiled}, compiled
            for v in compiled:
                # The signatures compiled here and those in numba's on-disk index (other dtypes may share the
                # source): the runner's address, the chunk and the wave are int64s in each.
                cached = {key[0] for key in v.launcher._cache._cache_file._load_index()}
                leads = {tuple(sig[:3]) for sig in set(v.launcher.signatures) | cached}
                assert leads == {(numba.int64,) * 3}, (kernel, v.mode, leads)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


@pad.kernel
def k_corner_add(i, corner, x, f, g):
    f[i % 3, corner[i] // 8, corner[i] % 8] += x[i]
    g[i % 3, corner[i] // 8, corner[i] % 8] += x[i] * x[i]


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 numba threads")
def test_private_buffers_of_one_shape_are_kept_zero_for_later_launches():
    """Two arrays of one shape get a private buffer each; summing them zeroes them, and later launches take
    them back (all of them, not one): each launch's sums stay exact."""
    rng = np.random.default_rng(8)
    corner = np.sort(rng.integers(0, 40 * 8, 6000))
    x = rng.uniform(-1, 1, 6000)
    expected_f, expected_g = np.zeros((3, 40, 8)), np.zeros((3, 40, 8))
    at = (np.arange(6000) % 3, corner // 8, corner % 8)
    np.add.at(expected_f, at, x)
    np.add.at(expected_g, at, x * x)
    numba.set_num_threads(2)
    try:
        for _ in range(3):
            f, g = np.zeros((3, 40, 8)), np.zeros((3, 40, 8))
            pad.launch(k_corner_add, 6000, corner, x, f, g)
            np.testing.assert_allclose(f, expected_f, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(g, expected_g, rtol=1e-12, atol=1e-12)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def test_serial_and_parallel_twins_keep_apart_in_the_cache():
    """numba keys its cache by a function's code, not its options: a function compiled with and without
    ``parallel=True`` would share one cache entry, each loading whichever compiled first."""
    from pad.kernel import runtime
    from pad.parallel import cpu

    serial, parallel = runtime.serial_and_parallel(cpu._add_rows)
    assert not serial.targetoptions.get("parallel") and parallel.targetoptions.get("parallel")
    assert serial._cache._cache_file._index_path != parallel._cache._cache_file._index_path
    out, rows = np.zeros(5), np.arange(15.0).reshape(3, 5)
    parallel(out, rows.copy())
    np.testing.assert_array_equal(out, rows.sum(axis=0))


@numba.njit(parallel=True)
def _claim_all(counters, k, taken):
    """Each of ``taken.shape[0]`` loop iterations claims counts of ``counters[k]`` until ``taken.shape[1]``
    are handed out, marking each count it got."""
    for t in numba.prange(taken.shape[0]):
        while True:
            g = runtime.claim(counters, k)
            if g >= taken.shape[1]:
                break
            taken[t, g] += 1


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 numba threads")
def test_claims_hand_out_each_group_once():
    """A colour's groups go to whichever thread comes free (``runtime.claim``): every count is handed out
    exactly once however the threads interleave, and the counter ends past them all."""
    counters = np.zeros(3, np.int64)
    counters[2] = 7
    taken = np.zeros((8, 20000), np.int64)
    _claim_all(counters, 1, taken)
    np.testing.assert_array_equal(taken.sum(axis=0), np.ones(20000, np.int64))
    assert counters[0] == 0 and counters[1] >= 20000 and counters[2] == 7


@pad.kernel
def k_squares_of_shared(i, idx, x, y):
    y[i] = x[idx[i]] * x[idx[i]]


def squares_of_shared(idx, x, y):
    pad.launch(k_squares_of_shared, idx.shape[0], idx, x, y)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 numba threads")
def test_a_planned_launch_counts_each_colour_on_lines_of_its_own(monkeypatch):
    """A launch by a colouring keeps each colour's count of groups done and each thread's claims on a cache
    line of its own (``runtime.counter_words``): after it, every colour's count is its groups, and no
    counter sits between them; its adjoint is the scatter's."""
    from pad.parallel import cpu

    launches: list[tuple[cpu.Launch, np.ndarray]] = []
    call = cpu.Launch.__call__

    def recorded(self):
        out = call(self)
        launches.append((self, None if self.claimed is None else self.claimed.copy()))
        return out

    monkeypatch.setattr(cpu.Launch, "__call__", recorded)
    idx = np.arange(4000) * 7 % 1000  # each element read by four launch indices far apart: coloured
    x, seed = np.linspace(0.5, 1.5, 1000), np.linspace(-1.0, 1.0, 4000)
    dx = np.zeros(1000)
    numba.set_num_threads(2)
    try:
        pad.autodiff(squares_of_shared, idx, pad.Dup(x, dx), pad.Dup(np.zeros(4000), seed.copy()))
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    np.testing.assert_allclose(dx, np.bincount(idx, 2.0 * x[idx] * seed, minlength=1000), rtol=1e-12)
    (launch, claimed), *_ = [(la, c) for la, c in launches if c is not None]
    colours = len(launch.plan.colours) - 1
    assert launch.plan.strategy.startswith("coloured") and colours > 1
    assert claimed.size == runtime.counter_words(colours, 2)
    groups = [min(launch.slots, int(c)) for c in np.diff(launch.plan.colours)]
    assert [claimed[runtime.done_counter(w, 2)] for w in range(colours)] == groups
    assert not np.any(claimed.reshape(colours, 3, runtime.LINE_WORDS)[:, :, 1:])


@pad.kernel
def k_scaled(i, coef, x, y):
    y[i] = coef[1] * x[i] + coef[2] * x[i] * x[i]


def scaled(coef, x, y):
    pad.launch(k_scaled, x.shape[0], coef, x, y)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 numba threads")
def test_private_copies_of_small_arrays_sit_on_lines_of_their_own():
    """Each slot of a private buffer of a small array (a kernel's coefficients, read at fixed indices) starts
    on a cache line of its own, so that threads adding into neighbouring slots never share one; the copies'
    padding takes no part in the sums."""
    from pad.parallel import cpu

    buffer = cpu._zeroed(16, np.zeros(3))
    assert all(buffer[g].ctypes.data % 64 == 0 for g in range(16))
    cpu.SPARE.give(buffer)
    rng = np.random.default_rng(11)
    x, seed = rng.uniform(-1, 1, 5000), rng.uniform(0.5, 1.5, 5000)
    coef = np.array([0.3, -1.2, 0.7])
    for threads in (1, 2):
        numba.set_num_threads(threads)
        try:
            dcoef = np.zeros(3)
            pad.autodiff(scaled, pad.Dup(coef, dcoef), x, pad.Dup(np.zeros(5000), seed.copy()))
        finally:
            numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        np.testing.assert_allclose(dcoef, [0.0, seed @ x, seed @ (x * x)], rtol=1e-12)


def test_a_replayed_launch_keeps_its_small_private_buffers_and_sums_them_right(monkeypatch):
    """A replayed adjoint keeps its small private buffers from call to call (it takes none from the pool), each
    sum leaving them zero; after a launcher that failed part way, the next call starts from fresh ones. (Each
    launch replayed from Python: tests/unit/test_driver.py replays them by the compiled driver.)"""
    from pad.parallel import cpu, driver

    monkeypatch.setattr(driver, "ENABLED", False)

    rng = np.random.default_rng(5)
    x, seed = rng.uniform(-1, 1, 5000), rng.uniform(0.5, 1.5, 5000)
    coef, dcoef = np.array([0.3, -1.2, 0.7]), np.zeros(3)
    y, dy = np.zeros(5000), np.zeros(5000)
    step = pad.graph(lambda: pad.autodiff(scaled, pad.Dup(coef, dcoef), x, pad.Dup(y, dy)))
    taken: list[tuple] = []
    real_take = cpu.SPARE.take
    monkeypatch.setattr(cpu.SPARE, "take", lambda *a: taken.append(a) or real_take(*a))

    def gradient() -> np.ndarray:
        dcoef[:], dy[:] = 0.0, seed
        step()
        return dcoef.copy()

    expected = [0.0, seed @ x, seed @ (x * x)]
    np.testing.assert_allclose(gradient(), expected, rtol=1e-12)
    first = len(taken)
    for _ in range(3):
        np.testing.assert_allclose(gradient(), expected, rtol=1e-12)
    assert first > 0 and len(taken) == first
    launchers = [(v, v.launcher) for v in k_scaled._variants.values() if v.mode == "adjoint"]

    def failing(real):
        def launcher(*args):
            real(*args)  # the private buffers filled, never summed
            raise RuntimeError("stopped")

        return launcher

    for v, real in launchers:
        v.launcher = failing(real)
    try:
        with pytest.raises(RuntimeError, match="stopped"):
            gradient()
    finally:
        for v, real in launchers:
            v.launcher = real
    np.testing.assert_allclose(gradient(), expected, rtol=1e-12)
