"""``pad.checkpoint``'s replayed adjoint steps: the same gradient, bit for bit, as the steps run by the tape."""

from __future__ import annotations

import math

import numpy as np
import pytest

import pad
import pad.checkpoint
from pad import arrays


@pad.kernel
def grow(i, x, y, c):
    y[i] = y[i] * math.sin(x[i]) + c[0] * x[i]


@pad.kernel
def mix(i, x, y):
    x[i] = x[i] + 0.1 * y[(i + 1) % 8]


def step(t, x, y, c):
    """The loop's step: the first launches once more than the others."""
    pad.launch(grow, 8, x, y, c)
    if t == 0:
        pad.launch(mix, 8, x, y)
    pad.launch(mix, 8, x, y)


def gradient(
    replay, snapshots=None, memory=None, nsteps=20, expected=None, while_=False, put=np.copy, get=None
):
    """The loop's state after it and its gradient, its stats, and how often the condition was asked
    (``while_``: a ``while_loop`` whose condition counts its calls, as a replayed step's Python cannot).
    The arrays are ``put(numpy array)`` (a device's), read back with ``get``."""
    x, y, c, dx, dy, dc = map(
        put,
        (np.linspace(0.1, 1.0, 8), np.ones(8), np.array([0.7]), np.zeros(8), np.arange(8.0) + 1, np.zeros(1)),
    )
    stats, asked = pad.checkpoint.Stats(), [0]

    def more(*_):
        asked[0] += 1
        return asked[0] <= nsteps

    def run(x, y, c):
        opts = {"snapshots": snapshots, "memory": memory, "stats": stats, "replay": replay}
        if while_:
            pad.checkpoint.while_loop(more, step, x, y, c, expected_steps=expected, **opts)
        else:
            pad.checkpoint.loop(step, nsteps, x, y, c, **opts)

    pad.autodiff(run, pad.Dup(x, dx), pad.Dup(y, dy), pad.Dup(c, dc))
    return [(get or np.asarray)(a) for a in (x, y, dx, dy, dc)], stats, asked[0]


@pytest.mark.parametrize("snapshots", [1, 3, 5])
def test_replayed_adjoint_steps_give_the_same_gradient(snapshots):
    launched, plain, _ = gradient(None, snapshots)
    replayed, stats, _ = gradient(lambda t: t == 0, snapshots)
    for a, b in zip(launched, replayed, strict=True):
        np.testing.assert_array_equal(a, b)
    assert plain.replayed == 0
    assert stats.replayed >= 15  # 20 adjoint steps: step 0, the first of the later phase, the last recorded
    assert stats.steps == plain.steps


def test_a_replay_follows_its_phase():
    """A phase that hides the first step's extra launch replays another step's work there: the gradient
    differs, so replays do run and the phase keys them."""
    launched, _, _ = gradient(None, 3)
    wrong, stats, _ = gradient(lambda t: 0, 3)
    assert stats.replayed > 0
    assert not np.array_equal(launched[2], wrong[2])


def test_replay_must_be_a_function():
    x = np.ones(8)
    with pytest.raises(TypeError, match="replay must be None or a function"):
        pad.autodiff(
            lambda x: pad.checkpoint.loop(lambda t, x: None, 2, x, snapshots=1, replay=True),
            pad.Dup(x, np.ones(8)),
        )


def test_unrecorded_steps_are_replayed_too():
    """Revolve's recomputations replay unrecorded steps of a phase from a record of one: the same bits."""
    launched, _, _ = gradient(None, 3)
    replayed, stats, _ = gradient(lambda t: t == 0, 3)
    for a, b in zip(launched, replayed, strict=True):
        np.testing.assert_array_equal(a, b)
    assert stats.replayed_forward > 20


@pytest.mark.parametrize("expected", [None, 20])
def test_where_records_are_not_kept_every_step_is_a_snapshot_recomputed_once(monkeypatch, expected):
    """Where replayed steps are cheaper than recorded ones (a GPU's CUDA graphs; here forced on the CPU),
    a budget that holds every step's records holds every step's snapshot instead: each step is recomputed
    once, from its own snapshot, replayed, and the gradient keeps its bits."""
    keep_all, plain, _ = gradient(None, memory=10**6)
    monkeypatch.setattr(pad.checkpoint.Loop, "keeps_records", lambda self: False)
    got, stats, _ = gradient(lambda t: t == 0, memory=10**6, expected=expected, while_=True)
    for a, b in zip(keep_all, got, strict=True):
        np.testing.assert_array_equal(a, b)
    # each step once more from its own snapshot, but the steps recorded to measure the sizes: online, the
    # first step's records are let go at the second; with an expected count the offline plan keeps two
    assert plain.steps == 20
    assert (stats.steps, stats.snapshots_peak) == ((37, 18) if expected else (40, 20))
    assert stats.replayed >= 15 and stats.replayed_forward >= 15  # all but the first of each kind


def test_where_records_are_not_kept_a_small_budget_plans_a_snapshot_schedule(monkeypatch):
    """An expected step count and a budget of a few snapshots: the loop plans the offline schedule the
    budget allows without records (Revolve), not an online placement, and the gradient keeps its bits."""
    keep_all, _, _ = gradient(None, memory=10**6)
    monkeypatch.setattr(pad.checkpoint.Loop, "keeps_records", lambda self: False)
    got, stats, _ = gradient(lambda t: t == 0, memory=1100, expected=20, while_=True)
    for a, b in zip(keep_all, got, strict=True):
        np.testing.assert_array_equal(a, b)
    assert stats.schedule == "revolve", stats  # planned offline: "online revolve" placed them as it went
    assert stats.snapshots_peak <= 1100 // stats.snapshot_bytes


@pytest.mark.parametrize("memory", range(550, 1250, 50))  # from the least this loop can run in
@pytest.mark.parametrize("records", [True, False])
def test_the_condition_is_asked_once_a_step_whatever_the_plan(monkeypatch, records, memory):
    """A condition that counts its calls ends the loop where it should under every budget: a plan that
    starts again from the loop's start does not ask it twice for a step."""
    if not records:
        monkeypatch.setattr(pad.checkpoint.Loop, "keeps_records", lambda self: False)
    _, _, asked = gradient(None, memory=memory, expected=20, while_=True)
    assert asked == 21


def check_segments(put, get, device):
    """``arrays.Segments`` copies ranges of every size and alignment into one buffer and back: a whole
    snapshot's batch (``device``: GPU memory, ``put``/``get`` its arrays)."""
    rng = np.random.default_rng(3)
    kinds = ((1, "f8"), (27, "f8"), (1000, "f4"), (3, "i2"), (4099, "u1"))  # byte tails of 8, 8, 0, 6, 3
    values = [rng.uniform(1, 100, n).astype(t) for n, t in kinds]
    ranges = [put(v) for v in values]
    base = put(rng.uniform(size=40))  # a range 8 bytes past a 16-byte boundary, and its last 8 bytes past it
    ranges.append(base[1:39])
    values.append(get(base)[1:39])
    addresses = [arrays.address(r) for r in ranges]
    sizes = [int(r.nbytes) for r in ranges]
    offsets = list(np.cumsum([0, *(-(-n // 256) * 256 for n in sizes)])[:-1])
    segments = arrays.Segments(addresses, [int(o) for o in offsets], sizes, device)
    buffer = put(np.zeros(sum(-(-n // 256) * 256 for n in sizes), np.uint8))
    segments.gather(arrays.address(buffer))
    packed = get(buffer)
    for v, o, n in zip(values, offsets, sizes, strict=True):
        assert packed[o : o + n].tobytes() == v.tobytes()
    for r in [*ranges, base]:
        r[...] = 0
    segments.scatter(arrays.address(buffer))
    for r, v in zip(ranges, values, strict=True):
        np.testing.assert_array_equal(get(r), v)
    assert get(base)[0] == 0 and get(base)[39] == 0  # nothing outside the ranges is written


def test_segments_copy_ranges_into_one_buffer_and_back():
    check_segments(np.array, np.asarray, device=False)


@pad.kernel
def feed(i, z, y):
    z[i] = z[i] + 0.5 * y[i]
    y[i] = y[i] - 0.1 * z[i]


def test_a_state_array_found_late_joins_the_batched_snapshots(monkeypatch):
    """Where every step holds a whole snapshot taken as one batch (records not kept; forced here), an array
    the steps first overwrite at step 5 joins the snapshots held beside their batches: restores put back
    both, and the gradient has the bits of a run that kept every step's records."""
    z = np.zeros(8)

    def late(t, x, y, c):
        step(t, x, y, c)
        if t >= 5:
            pad.launch(feed, 8, z, y)

    def gradient_of(replay):
        z[...] = 0.0
        x, y, c = np.linspace(0.1, 1.0, 8), np.ones(8), np.array([0.7])
        dx, dy, dc = np.zeros(8), np.arange(8.0) + 1.0, np.zeros(1)
        stats = pad.checkpoint.Stats()
        pad.autodiff(
            lambda x, y, c: pad.checkpoint.loop(late, 20, x, y, c, memory=10**6, stats=stats, replay=replay),
            pad.Dup(x, dx), pad.Dup(y, dy), pad.Dup(c, dc),
        )  # fmt: skip
        return [x, y, z.copy(), dx, dy, dc], stats

    want, _ = gradient_of(None)
    monkeypatch.setattr(pad.checkpoint.Loop, "keeps_records", lambda self: False)
    scattered, real = [], arrays.Segments.scatter
    monkeypatch.setattr(arrays.Segments, "scatter", lambda self, b: scattered.append(b) or real(self, b))
    got, stats = gradient_of(lambda t: (t == 0, t >= 5))
    for a, b in zip(want, got, strict=True):
        np.testing.assert_array_equal(a, b)
    assert stats.replayed > 0 and len(scattered) >= 15  # restored as batches, the first five with z beside
