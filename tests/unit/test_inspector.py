"""Scatter adjoints through index arrays: the inspector's plans (in place, coloured, private), their
validity when index arrays change, thread-count independence and bad index arrays."""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest

import pad
import pad.mpi
from pad.parallel import plans
from tests.unit.four_threads import assert_prints_identical


@pad.kernel
def k_gather(i, idx, x, y):
    """y[i] = f(x[idx[i]]): through a permutation, the adjoint's scatter touches each element once."""
    v = x[idx[i]]
    y[i] = v * v + 0.5 * v


@pad.kernel
def k_gather_csr(n, start, items, x, y):
    """Each n sums x over its slice of ``items`` (a partition of the elements, as LULESH's corner list)."""
    s = 0.0
    for c in range(start[n], start[n + 1]):
        s += x[items[c] // 4, items[c] % 4] * (1.0 + 0.1 * c)
    y[n] = s * s


@pad.kernel
def k_hex(i, nodes, x, y):
    """A many-to-one map: each element reads the values at its 4 nodes, each node shared by elements."""
    s = 0.0
    for k in range(4):
        s += x[nodes[i, k]] * (k + 1.0)
    y[i] = math.sin(s)


@pad.kernel
def k_hex_weighted(i, w, nodes, x, y):
    """k_hex's touches behind another argument and other temporaries: the same inspector."""
    s = w * w
    for k in range(4):
        s += x[nodes[i, k]] * (k + w)
    y[i] = math.cos(s)


@pad.kernel
def k_shift(i, idx):
    """A kernel that writes an index array."""
    idx[i] = (idx[i] + 1) % idx.shape[0]


@pad.kernel
def k_scale(i, a, x, y):
    """Every launch index reads ``a[0]``: its adjoint is a reduction, into a private buffer."""
    y[i] = a[0] * x[i]


@pad.kernel
def k_active(i, a, x, y):
    """An active scalar: its adjoint is a sum over the launch indices."""
    y[i] = a * x[i]


def strategy(name: str) -> str:
    return plans.stats()["kernels"][f"{name} (adjoint)"]["strategy"]


def inspections(name: str) -> int:
    return plans.stats()["kernels"].get(f"{name} (adjoint)", {}).get("inspections", 0)


def gradient(kernel, n, index, x, seed):
    dx = np.zeros_like(x)
    y = np.zeros(n)
    pad.autodiff(
        lambda x, y: pad.launch(kernel, n, *index, x, y), pad.Dup(x.copy(), dx), pad.Dup(y, seed.copy())
    )
    return dx


def test_a_permutation_adds_in_place():
    rng = np.random.default_rng(0)
    n = 5000
    idx = rng.permutation(n)
    x, seed = rng.uniform(0.5, 1.5, n), rng.uniform(-1, 1, n)
    dx = gradient(k_gather, n, (idx,), x, seed)
    expected = np.zeros(n)
    expected[idx] = seed * (2 * x[idx] + 0.5)
    np.testing.assert_allclose(dx, expected, rtol=1e-14)
    assert strategy("k_gather") == "in place"
    pad.check_grad(
        lambda x, y: pad.launch(k_gather, 200, idx[:200] % 200, x, y),
        pad.Dup(rng.uniform(0.5, 1.5, 200), np.zeros(200)),
        pad.Dup(np.zeros(200), np.zeros(200)),
    )


def test_a_partition_adds_in_place():
    rng = np.random.default_rng(1)
    n, m = 300, 4 * 250  # 300 slices of a permutation of the 1000 elements of x (250 x 4)
    items = rng.permutation(m)
    cuts = np.sort(rng.choice(np.arange(1, m), n - 1, replace=False))
    start = np.concatenate([[0], cuts, [m]]).astype(np.int64)
    x = rng.uniform(0.5, 1.5, (250, 4))
    dx = gradient(k_gather_csr, n, (start, items), x, np.ones(n))
    assert strategy("k_gather_csr") == "in place"
    expected = np.zeros(m)
    for c in range(n):
        s = sum(x.flat[items[j]] * (1.0 + 0.1 * j) for j in range(start[c], start[c + 1]))
        for j in range(start[c], start[c + 1]):
            expected[items[j]] += 2 * s * (1.0 + 0.1 * j)
    np.testing.assert_allclose(dx.ravel(), expected, rtol=1e-12)
    pad.check_grad(
        lambda x, y: pad.launch(k_gather_csr, n, start, items, x, y),
        pad.Dup(x.copy(), np.zeros_like(x)),
        pad.Dup(np.zeros(n), np.zeros(n)),
    )


def hex_nodes(cells: int) -> np.ndarray:
    """The 4 nodes of each cell of a strip of quads: 2 * (cells + 1) nodes, each in up to 2 cells."""
    e = np.arange(cells)
    return np.stack([e, e + 1, e + cells + 2, e + cells + 1], axis=1).astype(np.int64)


def test_a_many_to_one_map_is_coloured():
    rng = np.random.default_rng(2)
    n = 4000
    nodes = hex_nodes(n)
    x = rng.uniform(-1, 1, 2 * (n + 1))
    seed = rng.uniform(-1, 1, n)
    dx = gradient(k_hex, n, (nodes,), x, seed)
    assert strategy("k_hex").startswith("coloured")
    s = (x[nodes] * np.arange(1.0, 5.0)).sum(axis=1)
    expected = np.zeros_like(x)
    np.add.at(expected, nodes, (seed * np.cos(s))[:, None] * np.arange(1.0, 5.0))
    np.testing.assert_allclose(dx, expected, rtol=1e-12, atol=1e-14)


def test_a_structured_mesh_is_coloured_in_even_shares_of_large_blocks():
    """A 128 x 128 mesh of quads: blocks of one row of cells conflict only with the rows beside them, so two
    colours of 64 blocks each, which 1, 2, 4, 8 or 16 threads share evenly, four blocks or more a thread
    (blocks of half a row would need four colours)."""
    rng = np.random.default_rng(11)
    side = 128
    r, c = np.divmod(np.arange(side * side), side)
    corner = r * (side + 1) + c
    nodes = np.stack([corner, corner + 1, corner + side + 2, corner + side + 1], axis=1).astype(np.int64)
    n, x = side * side, rng.uniform(-1, 1, (side + 1) ** 2)
    seed = rng.uniform(-1, 1, n)
    dx = gradient(k_hex, n, (nodes,), x, seed)
    assert strategy("k_hex") == "coloured (2)"
    assert plans.stats()["kernels"]["k_hex (adjoint)"]["segments"] == [64, 64]
    s = (x[nodes] * np.arange(1.0, 5.0)).sum(axis=1)
    expected = np.zeros_like(x)
    np.add.at(expected, nodes, (seed * np.cos(s))[:, None] * np.arange(1.0, 5.0))
    np.testing.assert_allclose(dx, expected, rtol=1e-12, atol=1e-14)


def test_kernels_touching_alike_share_one_inspector():
    rng = np.random.default_rng(7)
    n, w = 500, 0.5
    nodes = hex_nodes(n)
    x = rng.uniform(-1, 1, 2 * (n + 1))
    seed = rng.uniform(-1, 1, n)
    gradient(k_hex, n, (nodes,), x, seed)
    dx = gradient(k_hex_weighted, n, (w, nodes), x, seed)
    (alone,), (weighted,) = (
        [v for v in k._variants.values() if v.inspector] for k in (k_hex, k_hex_weighted)
    )
    assert weighted.inspector.function is alone.inspector.function
    assert strategy("k_hex_weighted").startswith("coloured")
    weights = np.arange(4.0) + w
    s = w * w + (x[nodes] * weights).sum(axis=1)
    expected = np.zeros_like(x)
    np.add.at(expected, nodes, (-seed * np.sin(s))[:, None] * weights)
    np.testing.assert_allclose(dx, expected, rtol=1e-12, atol=1e-14)


def test_an_arbitrary_many_to_one_map_passes_check_grad():
    rng = np.random.default_rng(3)
    n, m = 400, 150
    nodes = rng.integers(0, m, (n, 4))
    pad.check_grad(
        lambda x, y: pad.launch(k_hex, n, nodes, x, y),
        pad.Dup(rng.uniform(-1, 1, m), np.zeros(m)),
        pad.Dup(np.zeros(n), np.zeros(n)),
    )
    assert strategy("k_hex").startswith("coloured")


@pad.kernel
def k_field(i, x, q, e):
    """Every launch index reads every charge: the charges' adjoint goes to private copies, 64 KiB each."""
    s = 0.0
    for j in range(q.shape[0]):
        s += q[j] * q[j] * (x[i] + 0.001 * j)
    e[i] = s


def field_args(n: int = 256, m: int = 8192) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(9)
    return rng.uniform(-1, 1, n), rng.uniform(-1, 1, m)


def test_private_copies_beyond_the_caches_share_slots_and_pass_check_grad():
    """64 copies of 8192 charges would take 4 MiB: consecutive segments share 32 of them."""
    from pad.parallel import cpu

    x, q = field_args()
    assert q.nbytes * plans.SLOTS > cpu.CACHED_PRIVATE_BYTES > q.nbytes * cpu.CACHED_SLOTS
    e = np.zeros(x.size)
    pad.check_grad(
        lambda x, q, e: pad.launch(k_field, x.size, x, q, e),
        pad.Dup(x, np.zeros_like(x)),
        pad.Dup(q, np.zeros_like(q)),
        pad.Dup(e, np.zeros_like(e)),
    )
    dq, seed = np.zeros_like(q), np.linspace(0.5, 1.5, x.size)
    pad.autodiff(
        lambda q, e: pad.launch(k_field, x.size, x, q, e),
        pad.Dup(q, dq),
        pad.Dup(np.zeros(x.size), seed.copy()),
    )
    expected = 2.0 * q * (seed.sum() * 0.001 * np.arange(q.size) + seed @ x)
    np.testing.assert_allclose(dq, expected, rtol=1e-12)


def test_an_element_every_index_touches_runs_last_on_one_thread():
    """A sentinel that many launch indices point at (a boundary's shared zero slot) must not serialize the rest."""
    rng = np.random.default_rng(4)
    n = 3000
    nodes = hex_nodes(n)
    sentinel = 2 * (n + 1)
    nodes[::7, 3] = sentinel
    x = rng.uniform(-1, 1, sentinel + 1)
    seed = rng.uniform(-1, 1, n)
    dx = gradient(k_hex, n, (nodes,), x, seed)
    s = (x[nodes] * np.arange(1.0, 5.0)).sum(axis=1)
    expected = np.zeros_like(x)
    np.add.at(expected, nodes, (seed * np.cos(s))[:, None] * np.arange(1.0, 5.0))
    np.testing.assert_allclose(dx, expected, rtol=1e-12, atol=1e-14)


def test_an_index_every_launch_index_shares_is_private():
    rng = np.random.default_rng(5)
    n = 1000
    a, x = np.array([1.5]), rng.uniform(-1, 1, n)
    da, dy = np.zeros(1), np.ones(n)
    pad.autodiff(
        lambda a, x, y: pad.launch(k_scale, n, a, x, y),
        pad.Dup(a, da),
        pad.Const(x),
        pad.Dup(np.zeros(n), dy),
    )
    np.testing.assert_allclose(da, [x.sum()], rtol=1e-13)


def test_an_index_array_changed_by_numpy_is_inspected_again():
    rng = np.random.default_rng(6)
    n = 2000
    idx = rng.permutation(n)
    x, seed = rng.uniform(0.5, 1.5, n), np.ones(n)
    gradient(k_gather, n, (idx,), x, seed)
    before = inspections("k_gather")
    gradient(k_gather, n, (idx,), x, seed)
    assert inspections("k_gather") == before  # the same contents: the cached plan
    idx[:100] = 0  # now many-to-one, in place: the plan must not be reused
    dx = gradient(k_gather, n, (idx,), x, seed)
    assert inspections("k_gather") == before + 1
    assert strategy("k_gather") != "in place"
    expected = np.zeros(n)
    np.add.at(expected, idx, 2 * x[idx] + 0.5)
    np.testing.assert_allclose(dx, expected, rtol=1e-13)


def test_an_index_array_changed_by_a_kernel_is_inspected_again():
    rng = np.random.default_rng(7)
    n = 2000
    idx = rng.permutation(n)
    x, seed = rng.uniform(0.5, 1.5, n), np.ones(n)
    gradient(k_gather, n, (idx,), x, seed)
    before = inspections("k_gather")
    pad.launch(k_shift, n, idx)
    dx = gradient(k_gather, n, (idx,), x, seed)
    assert inspections("k_gather") == before + 1
    expected = np.zeros(n)
    expected[idx] = 2 * x[idx] + 0.5
    np.testing.assert_allclose(dx, expected, rtol=1e-14)


@pad.kernel
def k_count_unless(i, idx, skip, counts):
    """Counts at ``idx[i]`` unless ``skip[0]`` is set: a flag that is the same for every launch index."""
    if skip[0] == 0:
        counts[idx[i]] += 1


@pad.kernel
def k_set(i, skip, value):
    skip[i] = value


def test_a_flag_written_between_launches_keeps_the_plan():
    """A branch on a flag (one element, the same for every launch index) runs both arms in the inspector:
    the plan does not read the flag, so a kernel writing it does not make the plan anew."""
    n = 3000
    idx = np.random.default_rng(8).integers(0, 50, n)
    skip, counts = np.zeros(1, np.int64), np.zeros(50, np.int64)
    pad.launch(k_count_unless, n, idx, skip, counts)
    made = plans.stats()["kernels"]["k_count_unless (primal)"]["inspections"]
    pad.launch(k_set, 1, skip, 1)
    pad.launch(k_count_unless, n, idx, skip, counts)
    pad.launch(k_set, 1, skip, 0)
    pad.launch(k_count_unless, n, idx, skip, counts)
    assert plans.stats()["kernels"]["k_count_unless (primal)"]["inspections"] == made
    np.testing.assert_array_equal(counts, 2 * np.bincount(idx, minlength=50))


@pad.kernel
def k_hex_cos(i, nodes, x, y):
    """``k_hex`` with a cosine: another kernel planned from the same node list."""
    s = 0.0
    for k in range(4):
        s += x[nodes[i, k]] * (k + 1.0)
    y[i] = math.cos(s)


def primal_inspections(name: str) -> int:
    return plans.stats()["kernels"].get(f"{name} (primal)", {}).get("inspections", 0)


def test_a_replay_compares_an_index_array_once_for_the_plans_made_from_it(monkeypatch):
    """Two adjoints planned from one node list keep one copy of it, and a replayed gradient compares the
    list with it once, not once per plan; a NumPy change between replays is still seen (both plans made
    anew). Each replay's gradient is the one ``autodiff`` gives without replays."""
    rng = np.random.default_rng(10)
    n = 3000
    nodes = hex_nodes(n)
    x, seed_y, seed_z = rng.uniform(-1, 1, 2 * (n + 1)), rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
    dx, y, dy, z, dz = np.zeros_like(x), np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)

    def step(x, y, z):
        pad.launch(k_hex, n, nodes, x, y)
        pad.launch(k_hex_cos, n, nodes, x, z)

    def unreplayed(*args):
        pad.autodiff(step, *args)

    def gradient(run) -> np.ndarray:
        dx[...], dy[...], dz[...] = 0.0, seed_y, seed_z
        run(pad.Dup(x, dx), pad.Dup(y, dy), pad.Dup(z, dz))
        return dx.copy()

    replayed = pad.graph(unreplayed)
    gradient(replayed)  # recorded
    assert replayed.why is None
    compares: list[bool] = []
    same = plans._same
    monkeypatch.setattr(plans, "_same", lambda a, copy: compares.append(a is nodes) or same(a, copy))
    for _ in range(2):
        compares.clear()
        ours = gradient(replayed)
        assert compares == [True]
        np.testing.assert_array_equal(ours, gradient(unreplayed))
    nodes[:, [0, 1]] = nodes[:, [1, 0]]
    before = inspections("k_hex") + inspections("k_hex_cos")
    ours = gradient(replayed)
    assert inspections("k_hex") + inspections("k_hex_cos") == before + 2
    np.testing.assert_array_equal(ours, gradient(unreplayed))


def test_a_frozen_index_array_is_never_compared(monkeypatch):
    """A frozen node list (``arrays.frozen``: nothing can write it) is kept by its plans as it is and never
    compared again, launched or replayed; its gradient is the one the same list, writeable, gives. NumPy
    refuses to make it writeable, and a kernel that stores into it is refused."""
    rng = np.random.default_rng(12)
    n = 3000
    nodes = hex_nodes(n)
    fixed = pad.arrays.frozen(nodes)
    assert pad.arrays.is_frozen(fixed) and pad.arrays.is_frozen(fixed[:, 1:])
    assert not pad.arrays.is_frozen(nodes) and not pad.arrays.is_frozen(np.frombuffer(bytearray(8)))
    with pytest.raises(ValueError, match="WRITEABLE"):
        fixed.flags.writeable = True
    x, seed = rng.uniform(-1, 1, 2 * (n + 1)), rng.uniform(-1, 1, n)
    compares: list[bool] = []
    same = plans._same
    monkeypatch.setattr(plans, "_same", lambda a, copy: compares.append(a is fixed) or same(a, copy))
    expected = gradient(k_hex, n, (nodes,), x, seed)
    before = inspections("k_hex")
    dx, y, dy = np.zeros_like(x), np.zeros(n), np.zeros(n)

    def run(x, y):
        pad.launch(k_hex, n, fixed, x, y)

    replayed = pad.graph(lambda *args: pad.autodiff(run, *args))
    for _ in range(3):  # recorded (the first, inspected), replayed twice
        dx[...], dy[...] = 0.0, seed
        replayed(pad.Dup(x, dx), pad.Dup(y, dy))
        np.testing.assert_array_equal(dx, expected)
    assert replayed.why is None and inspections("k_hex") == before + 1
    assert True not in compares
    with pytest.raises(ValueError, match=r"k_shift\): the kernel stores into argument 1, which is read-only"):
        pad.launch(k_shift, n, fixed.ravel())


def test_a_plan_from_frozen_arrays_is_bound_once_per_thread_count(monkeypatch):
    """A replayed launch whose plan is made from frozen index arrays asks for it no more while the thread
    count stays; at another count it is bound anew. Its gradient is the same throughout."""
    rng = np.random.default_rng(13)
    n = 3000
    fixed = pad.arrays.frozen(hex_nodes(n))
    x, seed = rng.uniform(-1, 1, 2 * (n + 1)), rng.uniform(-1, 1, n)
    expected = gradient(k_hex, n, (fixed,), x, seed)
    asked: list[str] = []
    plan = plans.plan
    monkeypatch.setattr(
        plans, "plan", lambda variant, *rest: asked.append(variant.kernel) or plan(variant, *rest)
    )
    dx, y, dy = np.zeros_like(x), np.zeros(n), np.zeros(n)

    def run(x, y):
        pad.launch(k_hex, n, fixed, x, y)

    replayed = pad.graph(lambda *args: pad.autodiff(run, *args))
    most = numba.config.NUMBA_NUM_THREADS
    counts = [most] * 3 + ([1] if most > 1 else [])  # recorded, replayed twice, replayed on one thread
    asks = []
    try:
        for threads in counts:
            numba.set_num_threads(threads)
            before = len(asked)
            dx[...], dy[...] = 0.0, seed
            replayed(pad.Dup(x, dx), pad.Dup(y, dy))
            np.testing.assert_array_equal(dx, expected)
            asks.append(len(asked) - before)
    finally:
        numba.set_num_threads(most)
    assert replayed.why is None and set(asked) == {"k_hex"}
    assert asks[0] > 0 and asks[1:3] == [0, 0]
    assert most == 1 or asks[3] > 0


@pad.kernel
def k_scatter(i, idx, x, y):
    """``y[idx[i]] += x[i]``: its primal accumulates at shared indices, by a plan."""
    y[idx[i]] += x[i]


@pad.kernel
def k_scatter_twice(i, idx, x, y):
    y[idx[i]] += 2.0 * x[i]


def test_a_replay_compares_again_after_an_operation_that_may_change_integers():
    """Within a replay, an index array found unchanged is compared again after an operation that may have
    changed integer arrays without telling the plans (here a collective of one rank, a copy into it)."""
    comm = pad.mpi.Comm(pad.mpi.COMM_WORLD.mpi.Split(pad.mpi.COMM_WORLD.rank))  # one rank each
    rng = np.random.default_rng(11)
    n = 2000
    first, second = rng.permutation(n), rng.integers(0, 40, n)
    idx, src, x, y = first.copy(), first.copy(), rng.uniform(-1, 1, n), np.zeros(n)

    def step(idx, src, x, y):
        pad.launch(k_scatter, n, idx, x, y)
        comm.Allreduce(src, idx, pad.mpi.SUM)  # idx = src
        pad.launch(k_scatter_twice, n, idx, x, y)

    g = pad.graph(step)
    g(idx, src, x, y)  # recorded: both plans made from ``first``, which the collective leaves as it was
    assert g.why is None and strategy_of("k_scatter_twice") == "in place"
    src[...] = second  # now the collective changes idx between the replay's launches
    expected = np.zeros(n)
    np.add.at(expected, first, x)
    np.add.at(expected, second, 2.0 * x)
    for made in (1, 0):  # the plan made from ``second`` in the first replay holds in the next
        idx[...], y[...] = first, 0.0
        before = primal_inspections("k_scatter_twice")
        g(idx, src, x, y)
        assert primal_inspections("k_scatter_twice") == before + made  # never the plan of ``first``
        assert strategy_of("k_scatter_twice") != "in place"
        np.testing.assert_allclose(y, expected, rtol=1e-13, atol=1e-13)


def strategy_of(name: str) -> str:
    return plans.stats()["kernels"][f"{name} (primal)"]["strategy"]


def test_an_out_of_range_entry_is_reported():
    n = 100
    idx = np.arange(n)
    idx[37] = 1000
    with pytest.raises(IndexError, match=r"index array 'idx' holds 1000 at position \(37,\).*'x'"):
        gradient(k_gather, n, (idx,), np.ones(n), np.ones(n))
    nodes = hex_nodes(50)
    nodes[12, 2] = -500
    with pytest.raises(IndexError, match=r"index array 'nodes' holds -500 at position \(12, 2\)"):
        gradient(k_hex, 50, (nodes,), np.ones(102), np.ones(50))


def test_a_short_index_array_is_reported():
    start = np.array([0, 2, 4], np.int64)  # three slices need four bounds
    with pytest.raises(
        IndexError, match=r"reads index array 'start' at \(3,\), out of range for its shape \(3,\)"
    ):
        gradient(k_gather_csr, 3, (start, np.arange(8)), np.ones((2, 4)), np.ones(3))


THREADS = """
import numba, numpy as np, pad
from tests.unit.test_inspector import field_args, k_active, k_field, k_hex, k_scale, hex_nodes
from tests.unit.corpus import k_scatter_add

rng = np.random.default_rng(8)
nodes = hex_nodes(3000)
x = rng.uniform(-1, 1, 2 * 3001)
idx = rng.integers(0, 50, 20000)
w = rng.uniform(0.5, 1.5, 20000)
seed = rng.uniform(-1, 1, 3000)
out = {}
for threads in (1, 2, 4):
    numba.set_num_threads(threads)
    dx, dy = np.zeros_like(x), seed.copy()
    pad.autodiff(lambda x, y: pad.launch(k_hex, 3000, nodes, x, y), pad.Dup(x.copy(), dx), pad.Dup(np.zeros(3000), dy.copy()))
    dw, dh = np.zeros_like(w), np.linspace(0.5, 1.5, 50)
    h = np.zeros(50)
    pad.autodiff(lambda w, h: pad.launch(k_scatter_add, 20000, idx, w, h), pad.Dup(w.copy(), dw), pad.Dup(h, dh))
    da = np.zeros(1)  # a sum over 20000 launch indices (per thread, then over threads, before)
    pad.autodiff(lambda a, y: pad.launch(k_scale, 20000, a, w, y), pad.Dup(np.ones(1), da), pad.Dup(np.zeros(20000), w - 1.0))
    (a,) = pad.autodiff(lambda a, y: pad.launch(k_active, 20000, a, w, y), pad.Active(2.0), pad.Dup(np.zeros(20000), w - 1.0))
    fx, fq = field_args()  # private copies that share slots (cpu.CACHED_PRIVATE_BYTES)
    dq = np.zeros_like(fq)
    pad.autodiff(lambda q, e: pad.launch(k_field, fx.size, fx, q, e), pad.Dup(fq, dq), pad.Dup(np.zeros(fx.size), fx + 2.0))
    out[threads] = (dx, dw, h, da, np.array([a]), dq)
for threads in (2, 4):
    for a, b in zip(out[1], out[threads]):
        assert np.array_equal(a, b), threads
print("identical")
"""


def test_gradients_are_identical_on_1_2_and_4_threads():
    assert_prints_identical(THREADS)


SERIAL_CHUNKS = """
import numba, numpy as np, pad
from pad.parallel import plans
from tests.unit.test_inspector import k_hex, hex_nodes

rng = np.random.default_rng(13)
nodes = hex_nodes(3000)
x, seed = rng.uniform(-1, 1, 2 * 3001), rng.uniform(-1, 1, 3000)
out = {}
for threads in (1, 4):
    numba.set_num_threads(threads)
    dx = np.zeros_like(x)
    pad.autodiff(lambda x, y: pad.launch(k_hex, 3000, nodes, x, y), pad.Dup(x.copy(), dx), pad.Dup(np.zeros(3000), seed.copy()))
    out[threads] = dx
assert plans.stats()["kernels"]["k_hex (adjoint)"]["strategy"].startswith("coloured")
assert len(plans.stats()["kernels"]["k_hex (adjoint)"]["segments"]) > 1
assert np.array_equal(out[1], out[4])
print("identical")
"""


def test_colours_apart_when_chunks_run_one_after_another():
    """A launch's colours run in one parallel region, each chunk waiting for the colour before to be done:
    where the chunks run one after another (PAD_DEBUG's runner), the first runs every group and the others
    find each colour done, so the launch neither hangs nor changes its sums."""
    assert_prints_identical(SERIAL_CHUNKS, PAD_DEBUG="1")


@pad.kernel
def k_histogram(i, x, w, h):
    """Bins computed from floating-point data: no inspector, private buffers."""
    b = min(int(x[i] * h.shape[0]), h.shape[0] - 1)
    h[b] += w[i]


def test_private_buffers_over_the_budget_are_fewer(monkeypatch):
    """Private copies are cut to fit ``PRIVATE_BYTES`` (never below one per thread): the sums stay right."""
    from pad.parallel import cpu

    rng = np.random.default_rng(9)
    x, w = rng.uniform(0, 1, 5000), rng.uniform(-1, 1, 5000)
    expected = np.zeros(100)
    np.add.at(expected, np.minimum((x * 100).astype(int), 99), w)
    monkeypatch.setattr(cpu, "PRIVATE_BYTES", 1000)  # 64 copies of 100 bins would take 51,200 bytes
    h = np.zeros(100)
    pad.launch(k_histogram, 5000, x, w, h)
    np.testing.assert_allclose(h, expected, rtol=1e-12, atol=1e-12)
