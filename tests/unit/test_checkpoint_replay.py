"""``pad.checkpoint``'s replayed adjoint steps: the same gradient, bit for bit, as the steps run by the tape."""

from __future__ import annotations

import math

import numpy as np
import pytest

import pad
import pad.checkpoint


@pad.kernel
def grow(i, x, y, c):
    y[i] = y[i] * math.sin(x[i]) + c[0] * x[i]


@pad.kernel
def mix(i, x, y):
    x[i] = x[i] + 0.1 * y[(i + 1) % 8]


def gradient(replay, snapshots=None, memory=None, nsteps=20):
    """The loop's state after it and its gradient; the first step launches once more than the others."""
    x, y, c = np.linspace(0.1, 1.0, 8), np.ones(8), np.array([0.7])
    dx, dy, dc = np.zeros(8), np.arange(8.0) + 1.0, np.zeros(1)
    stats = pad.checkpoint.Stats()

    def step(t, x, y, c):
        pad.launch(grow, 8, x, y, c)
        if t == 0:
            pad.launch(mix, 8, x, y)
        pad.launch(mix, 8, x, y)

    def run(x, y, c):
        pad.checkpoint.loop(
            step, nsteps, x, y, c, snapshots=snapshots, memory=memory, stats=stats, replay=replay
        )

    pad.autodiff(run, pad.Dup(x, dx), pad.Dup(y, dy), pad.Dup(c, dc))
    return [x, y, dx, dy, dc], stats


@pytest.mark.parametrize("snapshots", [1, 3, 5])
def test_replayed_adjoint_steps_give_the_same_gradient(snapshots):
    launched, plain = gradient(None, snapshots)
    replayed, stats = gradient(lambda t: t == 0, snapshots)
    for a, b in zip(launched, replayed, strict=True):
        np.testing.assert_array_equal(a, b)
    assert plain.replayed == 0
    assert stats.replayed >= 15  # 20 adjoint steps: step 0, the first of the later phase, the last recorded
    assert stats.steps == plain.steps


def test_a_replay_follows_its_phase():
    """A phase that hides the first step's extra launch replays another step's work there: the gradient
    differs, so replays do run and the phase keys them."""
    launched, _ = gradient(None, 3)
    wrong, stats = gradient(lambda t: 0, 3)
    assert stats.replayed > 0
    assert not np.array_equal(launched[2], wrong[2])


def test_replay_must_be_a_function():
    x = np.ones(8)
    with pytest.raises(TypeError, match="replay must be None or a function"):
        pad.autodiff(
            lambda x: pad.checkpoint.loop(lambda t, x: None, 2, x, snapshots=1, replay=True),
            pad.Dup(x, np.ones(8)),
        )
