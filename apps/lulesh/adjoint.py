"""LULESH's gradients with pad: the per-cycle gradient Enzyme measured, and the gradient of a whole run.

Per cycle (``--mode grad``): the time increment runs forward, then one ``pad.autodiff`` of the Lagrange
leap-frog step with respect to the whole state (every array of ``State``; the clock, which holds the
cycle's time step, is constant), seeded with deterministic non-zero values. Its reverse pass runs the
adjoint kernels and the transposed halo exchanges.

Whole run (``--mode sensitivity``): J = the Final Origin Energy (rank 0's ``e[0]`` at the end), and its
gradient with respect to the initial node coordinates and the model's parameters (``params``: ``einit``,
``hgcoef``, ...), through the set-up, the variable time step (Courant and hydro constraints, the minimum
over elements and over ranks, the growth limits, the cut to the stop time) and every cycle. The time loop
runs under ``pad.checkpoint.while_loop``, so at most ``snapshots`` copies of the state are kept.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

import pad
from apps.lulesh.hydro import Hydro, State

FIELDS = [f.name for f in dataclasses.fields(State)]


def seed_pattern(shape: tuple[int, ...], salt: int) -> np.ndarray:
    """Deterministic seeds in [0.5, 1.5) of either sign: the same on every run, different per array."""
    k = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    return np.sin(1.7 * k + salt) * 0.5 + np.sign(np.cos(0.3 * k + salt)) + 0.0


class StepGradient:
    """One cycle's gradient: ``pad.autodiff`` of the leap-frog step with respect to the whole state."""

    def __init__(self, hydro: Hydro) -> None:
        self.hydro = hydro
        self.seeds = {}
        self.shadows = {}
        probe = hydro.initial_state()
        for salt, name in enumerate(FIELDS):
            if name == "clock":
                continue
            value = getattr(probe, name)
            self.seeds[name] = hydro.memory.put(seed_pattern(value.shape, salt))
            self.shadows[name] = hydro.memory.put(np.zeros(value.shape))

    def arguments(self, s: State) -> list[Any]:
        """``s``'s arrays annotated for ``autodiff``: ``Dup`` with the seeds copied in, the clock ``Const``."""
        out: list[Any] = []
        for name in FIELDS:
            value = getattr(s, name)
            if name == "clock":
                out.append(pad.Const(value))
            else:
                self.shadows[name][...] = self.seeds[name]
                out.append(pad.Dup(value, self.shadows[name]))
        return out

    def __call__(self, s: State) -> dict[str, Any]:
        """Advance ``s`` by one leap-frog step and return the gradient of <seeds, state after> with respect
        to the state before (the shadows, by field name)."""
        pad.autodiff(self.step, *self.arguments(s))
        return self.shadows

    def step(self, *arrays: Any) -> None:
        self.hydro.leapfrog(State(*arrays))
