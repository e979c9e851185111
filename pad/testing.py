"""``check_grad``: one generic gradient checker, MPI-aware.

For a function ``f`` and annotated arguments it compares, along random directions ``t``:
- forward mode against central finite differences of the objective ``J = sum_k <seed_k, out_k>``;
- the dot-product identity ``<seed, J t> == <J^T seed, t>`` between forward and reverse mode.
Seeds are non-zero on every ``Dup`` array, inputs included, so accumulation into a non-zero shadow is tested
too. Under MPI every inner product is summed over ranks, so every rank reaches the same verdict.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from pad import arrays, tape
from pad.kernel import checks

__all__ = ["check_grad"]


def _allsum(value: float, op: str = "SUM") -> float:
    """Sum (or ``op="MAX"``) over MPI ranks when the program runs under MPI, else the value itself."""
    mpi_mod = sys.modules.get("mpi4py.MPI")
    if mpi_mod is None or not mpi_mod.Is_initialized() or mpi_mod.Is_finalized():
        return value
    return float(mpi_mod.COMM_WORLD.allreduce(float(value), op=getattr(mpi_mod, op)))


def _host(a: Any) -> np.ndarray:
    return arrays.to_host(a) if hasattr(a, "shape") else np.asarray(a)


def _dot(a: Any, b: Any) -> float:
    return float(np.dot(_host(a).ravel().astype(np.float64), _host(b).ravel().astype(np.float64)))


def check_grad(
    f: Callable[..., Any],
    *args: Any,
    rtol: float = 1e-6,
    atol: float = 1e-9,
    directions: int = 2,
    seed: int = 0,
) -> dict[str, float]:
    """Check ``autodiff`` and ``fwddiff`` of ``f`` against finite differences and each other.

    Arguments are annotated as for ``autodiff``: ``Dup(x, dx)`` arrays (``dx``'s content is ignored; the
    checker draws its own seeds), ``Active(s)`` scalars, ``Const`` and plain values. ``f`` must be
    deterministic and restartable: the checker calls it several times from the same initial values.
    Raises ``AssertionError`` with a readable report; returns the largest errors it measured, passing or not:
    ``fd`` (finite differences against forward mode) and ``dot`` (forward against reverse mode) relative to
    the larger of the two values, ``fd_abs`` and ``dot_abs`` absolute (a comparison passes when its absolute
    error is within ``atol + rtol`` times the larger value).
    """
    rng = np.random.default_rng(seed + 7919 * _rank())
    dups = [(i, a) for i, a in enumerate(args) if isinstance(a, tape.Dup) and hasattr(a.value, "shape")]
    actives = [(i, a) for i, a in enumerate(args) if isinstance(a, tape.Active)]
    if not dups and not actives:
        raise ValueError("check_grad needs at least one Dup array or Active scalar to differentiate")
    initial = {i: _host(a.value).copy() for i, a in dups}
    seeds = {
        i: rng.uniform(0.5, 1.5, a.value.shape) * rng.choice([-1.0, 1.0], a.value.shape) for i, a in dups
    }
    lowest = min((np.finfo(a.value.dtype).eps for _, a in dups), default=np.finfo(np.float64).eps)
    step = float(np.cbrt(lowest))

    def restore() -> None:
        for i, a in dups:
            arrays.assign(a.value, initial[i])

    def run_plain(shift: dict[int, np.ndarray], scalar_shift: dict[int, float]) -> float:
        restore()
        for i, a in dups:
            arrays.assign(a.value, initial[i] + shift[i])
        plain = [
            a.value
            if isinstance(a, tape.Dup)
            else (a.value + scalar_shift[i] if isinstance(a, tape.Active) else a)
            for i, a in enumerate(args)
        ]
        plain = [p.value if isinstance(p, tape.Const) else p for p in plain]
        f(*plain)
        return _allsum(sum(_dot(seeds[i], a.value) for i, a in dups))

    # Reverse mode once: the gradient of J with respect to every input.
    restore()
    reverse_args = [
        tape.Dup(a.value, arrays.like(a.value, seeds[i])) if i in seeds else a for i, a in enumerate(args)
    ]
    active_grads = tape.autodiff(f, *reverse_args)
    gradients = {i: _host(reverse_args[i].shadow).astype(np.float64) for i, _ in dups}

    report: list[str] = []
    worst = {"fd": 0.0, "dot": 0.0, "fd_abs": 0.0, "dot_abs": 0.0}
    for d in range(directions):
        tang = {i: rng.uniform(-1.0, 1.0, a.value.shape) for i, a in dups}
        stang = {i: float(rng.uniform(0.5, 1.5)) for i, _ in actives}
        scale = max([1.0] + [float(np.abs(v).max(initial=0.0)) for v in initial.values()])
        scale = max([scale] + [abs(float(a.value)) for _, a in actives])
        h = step * _allsum(scale, "MAX")  # one step on every rank: J is a sum over ranks

        # Forward mode along the direction.
        restore()
        fwd_args = [
            tape.Dup(a.value, arrays.like(a.value, tang[i]))
            if i in tang
            else (tape.Dup(a.value, stang[i]) if i in stang else a)
            for i, a in enumerate(args)
        ]
        tape.fwddiff(f, *fwd_args)
        jt = _allsum(sum(_dot(seeds[i], fwd_args[i].shadow) for i, _ in dups))
        local = sum(_dot(gradients[i], tang[i]) for i, _ in dups)
        jtt = _allsum(local + sum(active_grads[k] * stang[i] for k, (i, _) in enumerate(actives)))

        # Central finite differences of J along the same direction.
        plus = run_plain({i: h * t for i, t in tang.items()}, {i: h * s for i, s in stang.items()})
        minus = run_plain({i: -h * t for i, t in tang.items()}, {i: -h * s for i, s in stang.items()})
        fd = (plus - minus) / (2.0 * h)
        restore()

        for name, a, b in (("fd", fd, jt), ("dot", jt, jtt)):
            err = abs(a - b) / max(abs(a), abs(b), 1e-300)
            worst[name] = max(worst[name], err)
            worst[f"{name}_abs"] = max(worst[f"{name}_abs"], abs(a - b))
            if abs(a - b) > atol + rtol * max(abs(a), abs(b)):
                label = (
                    "finite differences vs forward" if name == "fd" else "forward vs reverse (dot product)"
                )
                report.append(f"direction {d}: {label}: {a!r} vs {b!r} (relative error {err:.3e})")
    if report and _size() == 1:  # one process (a rank alone would hang the others): name the cause
        restore()
        report.append(_diagnose(f, args, seeds))
        restore()
    _finish_check(report)
    return worst


LIKELY = (
    "likely causes pad cannot see by itself: a NumPy write between pad operations to an array it does not "
    "protect (one f allocates, a pad.Const, a GPU array), which pad.copy/scale/axpy/fill or a kernel would "
    "differentiate; an index out of range in a kernel; PAD_DEBUG=1 checks both"
)


def _diagnose(f: Callable[..., Any], args: tuple, seeds: dict[int, np.ndarray]) -> str:
    """Rerun the reverse pass under ``PAD_DEBUG``: the error it raises, if any, names the cause."""
    annotated = [
        tape.Dup(a.value, arrays.like(a.value, seeds[i])) if i in seeds else a for i, a in enumerate(args)
    ]
    try:
        with checks.debug(True):
            tape.autodiff(f, *annotated)
    except (IndexError, ValueError) as e:
        return f"rerun under PAD_DEBUG=1, pad found: {e}"
    return LIKELY


def _rank() -> int:
    mpi_mod = sys.modules.get("mpi4py.MPI")
    if mpi_mod is None or not mpi_mod.Is_initialized() or mpi_mod.Is_finalized():
        return 0
    return int(mpi_mod.COMM_WORLD.Get_rank())


def _size() -> int:
    mpi_mod = sys.modules.get("mpi4py.MPI")
    if mpi_mod is None or not mpi_mod.Is_initialized() or mpi_mod.Is_finalized():
        return 1
    return int(mpi_mod.COMM_WORLD.Get_size())


def _finish_check(report: list[str]) -> None:
    """Raise on every rank if any rank found a mismatch (verdicts are agreed over ranks)."""
    failed = _allsum(1.0 if report else 0.0)
    if failed:
        lines = report or ["another rank found a mismatch"]
        raise AssertionError("check_grad failed:\n  " + "\n  ".join(lines))
