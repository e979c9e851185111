"""Local optimization of docking poses (``--optimize K``): L-BFGS per pose, and two baselines.

Each rank moves its own poses, all at once: every step scores (and differentiates) all of them in one
launch, and the optimizer's arithmetic is batched over poses with the array module of the poses (NumPy or
CuPy), as docking codes' local search (AutoDock Vina's BFGS, say) runs per pose. A pose is its six
coordinates (rx, ry, rz in radians, tx, ty, tz in Å); its energy is a float32 sum over atom pairs.

- ``LBFGS``: limited-memory BFGS over each pose's six coordinates with the gradient from pad
  (``Docking.gradient("poses")``), and a backtracking line search that accepts a step only where the
  energy falls by the Armijo condition: every pose's energy falls or the pose stays where it was.
- ``Descent``: steps along the normalized gradient, kept where the energy falls, halved where not.
- ``RandomSearch``: a (1+1) evolution strategy per pose: a Gaussian perturbation, kept where the energy falls;
  the perturbation's size grows after a success and shrinks after a failure (the one-fifth rule).

``optimize(dock, method, steps=K)`` or ``seconds=T`` runs one of them for K steps or until T seconds have
passed (equal-time comparisons, ``scripts/bench_optimize.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from apps.cli import InputError
from apps.minibude.driver import Docking

INITIAL_STEP = 0.05
"""The first move of every method: its length in the six coordinates (radians and Å alike)."""

MAX_STEP = 1.0
"""L-BFGS: the longest move of a pose in one step."""

ARMIJO = 1e-4
"""L-BFGS: a step must lower the energy by this fraction of its first-order prediction."""

TRIALS = 3
"""L-BFGS: energy evaluations of the line search per step. Every trial scores every pose, so one pose's
long backtracking would make every pose's step cost as much: a pose without an acceptable step after these
stays put and goes on halving its step in the next step."""

SMALLEST_MOVE = 1e-6
"""L-BFGS: a pose whose trial move is shorter than this (float32 coordinates hardly move) starts again from
its gradient, without its history."""


class LBFGS:
    """L-BFGS with ``memory`` pairs of moves and gradient changes per pose, batched over the poses.

    The search direction is the two-loop recursion's, per pose (a pair that would not keep the inverse
    Hessian estimate positive definite, ``s.y <= 0``, is skipped). The line search is backtracking with the
    Armijo condition: it starts at the full step (at most ``MAX_STEP`` long) and halves it where the energy
    does not fall enough, so a pose's energy falls at every step or the pose stays where it was.
    """

    name = "L-BFGS"

    def __init__(self, dock: Docking, memory: int = 8) -> None:
        if memory < 1:
            raise InputError(f"L-BFGS: memory {memory} must be at least 1")
        xp = self.xp = dock.xp
        self.dock = dock
        self.x = dock.poses.astype(np.float64)
        self.f = dock.score().astype(np.float64)
        self.g = dock.gradient("poses").astype(np.float64)
        n = self.x.shape[1]
        self.s = xp.zeros((memory, 6, n))
        self.y = xp.zeros((memory, 6, n))
        self.rho = xp.zeros((memory, n))  # 1 / (s.y) per pair; 0: no pair
        self.newest = -1
        self.fraction = xp.ones(n)  # the first trial's fraction of the full step (below 1: still searching)

    def direction(self) -> Any:
        """The two-loop recursion: minus the inverse Hessian estimate times the gradient, per pose."""
        xp, m = self.xp, len(self.rho)
        order = [(self.newest - k) % m for k in range(m)]  # newest first
        q = self.g.copy()
        alphas = {}
        for i in order:
            alphas[i] = self.rho[i] * (self.s[i] * q).sum(axis=0)
            q -= alphas[i] * self.y[i]
        last = order[0]
        yy = (self.y[last] ** 2).sum(axis=0)
        norm = xp.sqrt((self.g**2).sum(axis=0))
        # no pair yet: a first move INITIAL_STEP long along the gradient (none where the gradient is zero)
        gamma = xp.where(
            self.rho[last] > 0,
            1.0 / xp.maximum(self.rho[last] * yy, 1e-300),
            INITIAL_STEP / xp.maximum(norm, 1e-300),
        )
        r = gamma * q
        for i in reversed(order):
            beta = self.rho[i] * (self.y[i] * r).sum(axis=0)
            r += self.s[i] * (alphas[i] - beta)
        return -r

    def step(self) -> None:
        xp, dock = self.xp, self.dock
        d = self.direction()
        slope = (self.g * d).sum(axis=0)
        downhill = slope < 0.0
        d = xp.where(downhill, d, -self.g)  # where the estimate went wrong, the gradient
        slope = xp.where(downhill, slope, -(self.g**2).sum(axis=0))
        length = xp.sqrt((d * d).sum(axis=0))
        full = xp.minimum(1.0, MAX_STEP / xp.maximum(length, 1e-300))  # the full step's fraction of d
        fraction = self.fraction.copy()
        pending = slope < 0.0  # a zero gradient: nowhere to go
        x_new, f_new = self.x.copy(), self.f.copy()
        for _ in range(TRIALS):
            if not bool(pending.any()):
                break
            alpha = fraction * full
            trial = xp.where(pending, (self.x + alpha * d).astype(np.float32), dock.poses)
            dock.poses[:] = trial
            energies = dock.score().astype(np.float64)
            accept = pending & (energies <= self.f + ARMIJO * alpha * slope)
            x_new = xp.where(accept, trial.astype(np.float64), x_new)
            f_new = xp.where(accept, energies, f_new)
            pending &= ~accept
            fraction = xp.where(pending, 0.5 * fraction, fraction)
        dock.poses[:] = x_new.astype(np.float32)
        g_new = dock.gradient("poses").astype(np.float64)
        s, y = x_new - self.x, g_new - self.g
        sy = (s * y).sum(axis=0)
        self.newest = (self.newest + 1) % len(self.rho)
        self.s[self.newest], self.y[self.newest] = s, y
        self.rho[self.newest] = xp.where(sy > 0.0, 1.0 / xp.where(sy > 0.0, sy, 1.0), 0.0)  # unmoved: none
        # a pose still searching goes on with its step's fraction; one whose trials hardly move restarts
        restart = pending & (fraction * full * length < SMALLEST_MOVE)
        self.rho[:, restart] = 0.0
        self.fraction = xp.where(pending & ~restart, fraction, 1.0)
        self.x, self.f, self.g = x_new, f_new, g_new


class Descent:
    """Steps along each pose's normalized gradient, kept where the energy falls; else the step is halved."""

    name = "gradient-descent"

    def __init__(self, dock: Docking) -> None:
        self.dock, self.xp = dock, dock.xp
        self.best = dock.score().copy()
        self.length = self.xp.full(dock.nlocal, INITIAL_STEP, np.float32)

    def step(self) -> None:
        xp, dock = self.xp, self.dock
        grad = dock.gradient("poses")
        norm = xp.sqrt((grad * grad).sum(axis=0))
        previous = dock.poses.copy()
        dock.poses -= self.length * (grad / xp.maximum(norm, np.float32(1e-12)))
        better = self.keep(dock.score(), previous)
        self.length = xp.where(better, self.length, self.length * np.float32(0.5))

    def keep(self, trial: Any, previous: Any) -> Any:
        """Keep the poses whose energy fell to ``trial``, put the others back to ``previous``; which fell."""
        better = trial < self.best
        self.dock.poses[:] = self.xp.where(better, self.dock.poses, previous)
        self.best = self.xp.where(better, trial, self.best)
        return better


class RandomSearch(Descent):
    """A (1+1) evolution strategy per pose: Gaussian moves of size ``length``, kept where the energy falls;
    ``length`` grows by 1.5 after a success and shrinks by 1.5^(-1/4) after a failure (the one-fifth rule)."""

    name = "random-search"

    def __init__(self, dock: Docking, seed: int = 0) -> None:
        super().__init__(dock)
        self.random = np.random.default_rng(seed + dock.rank)

    def step(self) -> None:
        xp, dock = self.xp, self.dock
        previous = dock.poses.copy()
        noise = xp.asarray(self.random.standard_normal(previous.shape, dtype=np.float32))
        dock.poses += self.length * noise / np.float32(np.sqrt(6.0))
        better = self.keep(dock.score(), previous)
        self.length = self.length * xp.where(better, np.float32(1.5), np.float32(1.5**-0.25))


METHODS: dict[str, Any] = {"lbfgs": LBFGS, "descent": Descent, "random": RandomSearch}


def optimize(
    dock: Docking,
    method: str,
    steps: int | None = None,
    seconds: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """Run ``method`` (a key of ``METHODS``) on every pose for ``steps`` steps, or until ``seconds`` of
    ``clock`` have passed (the ranks agree on when); leaves the poses in ``dock.poses``.

    Returns the steps run, the seconds of ``clock`` they took (the slowest rank's), and over all ranks how
    many poses' energies fell and the total fall."""
    if method not in METHODS:
        raise InputError(f"--optimizer: {method!r} is not one of {', '.join(METHODS)}")
    if (steps is None) == (seconds is None):
        raise InputError("optimize: give steps or seconds, not both")
    if steps is not None and steps < 0:
        raise InputError(f"--optimize: {steps} steps must not be negative")
    if seconds is not None and not seconds >= 0.0:
        raise InputError(f"optimize: {seconds} seconds must not be negative")
    comm = dock.comm

    def elapsed() -> float:
        dock.sync()
        spent = clock() - begin
        return comm.allreduce(spent, op=_max()) if comm is not None else spent

    start = dock.score().copy()
    begin = clock()
    optimizer = METHODS[method](dock)
    done = 0
    while done != steps and (seconds is None or elapsed() < seconds):
        optimizer.step()
        done += 1
    spent = elapsed()
    final = dock.score()
    improved = int((final < start).sum())
    drop = float((start - final).astype(np.float64).sum())
    if comm is not None:
        improved, drop = comm.allreduce(improved), comm.allreduce(drop)
    return {
        "method": method,
        "steps": done,
        "seconds": spent,
        "poses_improved": improved,
        "total_energy_drop": drop,
    }


def _max() -> Any:
    from mpi4py import MPI

    return MPI.MAX
