"""The hand-written peer of pad's miniBUDE gradient on GPUs: energies and their gradient with respect to the
protein in one numba.cuda kernel, written as a CUDA programmer would, beside pad's in one run.

It takes the design pad's generated fused kernel has (four poses per work item, a group of lanes sharing
the loop over protein atoms, each atom's gradient summed over the four poses in registers, then over the
groups of a warp with shuffles, then added atomically), and writes each pair's adjoint tightly by hand: one
reciprocal square root gives the distance and the slope, and no value is kept that the adjoint does not
need. It is what that design costs at best, and so how far pad's derived kernel is from hand-written code.
``kink="split"`` takes pad's rule at a tie of ``min(t, 0)`` (half the slope at ``t == 0``); ``"below"``
takes a C++ programmer's (the slope only where ``t < 0``), one compare fewer per term.

Usage (on a GPU): ``python scripts/bench_minibude_hand.py [DECK_DIR] [--iterations N] [--lanes G]
[--json PATH]``; DECK_DIR defaults to the shipped bm1. Prints one JSON object; fails if the hand-written
gradient or energies differ from pad's.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from pad.kernel.cuda_runtime import WARP_SHUFFLES, group_sum, warp_sum  # numba-cuda, NumPy shim first
from pad.kernel.emit import SHARED_ADJOINT_REGISTERS

from numba import config, cuda, float32  # isort: skip  (after pad's shim: numba-cuda needs it under NumPy 2.5)

from apps.minibude.kernels import rotation  # isort: skip

KINKS = ("split", "below")
POSES = 4  # per work item, as pad's fasten_x4
# pad's cap for adjoints whose lanes share loops, for a like-for-like kernel (numba's simulator has no cap)
REGISTER_CAP = {} if config.ENABLE_CUDASIM else {"max_registers": SHARED_ADJOINT_REGISTERS}  # type: ignore[attr-defined]

if config.ENABLE_CUDASIM:  # type: ignore[attr-defined]

    @cuda.jit(device=True)
    def _rsqrt(x: float) -> Any:  # numba's simulator has no libdevice
        return float32(1.0) / math.sqrt(x)

else:
    from numba.cuda.libdevice import rsqrtf as _rsqrt


# The app's rotation matrix (the reference's convention), compiled as a CUDA device function.
_rows = cuda.jit(device=True, fastmath=True)(rotation.py_func)


@cuda.jit(device=True, fastmath=True)
def _rotation(poses: Any, i: int) -> Any:
    return _rows(poses[0, i], poses[1, i], poses[2, i])


@cuda.jit(device=True, fastmath=True)
def _place(poses: Any, i: int, r: Any, ax: float, ay: float, az: float) -> Any:
    return (
        poses[3, i] + ax * r[0] + ay * r[1] + az * r[2],
        poses[4, i] + ax * r[3] + ay * r[4] + az * r[5],
        poses[5, i] + ax * r[6] + ay * r[7] + az * r[8],
    )


def make_kernel(kink: str) -> Any:
    """The fused kernel ``(lanes, protein_xyz, ligand_xyz, ligand_type, coef, poses, seed, energies, grad)``
    for the tie rule ``kink``; one launch index per ``lanes`` threads, ``POSES`` poses each."""
    if kink not in KINKS:
        raise ValueError(f"kink: {kink!r} is not one of {', '.join(KINKS)}")
    split = kink == "split"

    @cuda.jit(device=True, fastmath=True)
    def slope(t: float) -> Any:
        zero = float32(0.0)
        if split:
            return float32(t < zero) + float32(0.5) * float32(t == zero)
        return float32(t < zero)

    @cuda.jit(device=True, fastmath=True)
    def pair(lx: float, ly: float, lz: float, p: Any, s: float) -> Any:
        """(energy, and its gradient wrt the ligand atom times the seed ``s``) of one pair."""
        x, y, z = lx - p[0], ly - p[1], lz - p[2]
        d2 = x * x + y * y + z * z
        r = _rsqrt(d2)
        d = d2 * r
        zero = float32(0.0)
        t0, t1, t2 = d - p[3], d - p[6], d - p[8]
        e = p[4] * min(t0, zero) + p[5] * min(t1, zero) + p[7] * min(t2, zero)
        c = s * r * (p[4] * slope(t0) + p[5] * slope(t1) + p[7] * slope(t2))
        return e, c * x, c * y, c * z

    @cuda.jit(fastmath=True, **REGISTER_CAP)
    def fused(lanes, protein_xyz, ligand_xyz, ligand_type, coef, poses, seed, energies, grad):  # type: ignore[no-untyped-def]
        t = cuda.grid(1)
        first, lane, n = POSES * (t // lanes), t % lanes, poses.shape[1]
        i0, i1, i2, i3 = (
            min(first, n - 1),
            min(first + 1, n - 1),
            min(first + 2, n - 1),
            min(first + 3, n - 1),
        )
        ra, rb, rc, rd = (
            _rotation(poses, i0),
            _rotation(poses, i1),
            _rotation(poses, i2),
            _rotation(poses, i3),
        )
        zero = float32(0.0)
        # Spare slots (past the last pose) have seed 0: nothing flows back through them.
        s0 = seed[i0] if first < n else zero
        s1 = seed[i1] if first + 1 < n else zero
        s2 = seed[i2] if first + 2 < n else zero
        s3 = seed[i3] if first + 3 < n else zero
        e0 = e1 = e2 = e3 = zero
        natpro = protein_xyz.shape[1]
        for il in range(ligand_xyz.shape[0]):
            lt = ligand_type[il]
            ax, ay, az = ligand_xyz[il, 0], ligand_xyz[il, 1], ligand_xyz[il, 2]
            x0, y0, z0 = _place(poses, i0, ra, ax, ay, az)
            x1, y1, z1 = _place(poses, i1, rb, ax, ay, az)
            x2, y2, z2 = _place(poses, i2, rc, ax, ay, az)
            x3, y3, z3 = _place(poses, i3, rd, ax, ay, az)
            for base in range(0, natpro, lanes):  # every lane runs every trip: the warp stays converged
                ip = base + lane
                j = min(ip, natpro - 1)
                live = float32(ip < natpro)  # a lane past the last atom adds nothing
                p = (
                    protein_xyz[0, j],
                    protein_xyz[1, j],
                    protein_xyz[2, j],
                    coef[lt, 0, j],
                    live * coef[lt, 1, j],
                    live * coef[lt, 2, j],
                    coef[lt, 3, j],
                    live * coef[lt, 4, j],
                    coef[lt, 5, j],
                )
                ea, ax0, ay0, az0 = pair(x0, y0, z0, p, s0)
                eb, ax1, ay1, az1 = pair(x1, y1, z1, p, s1)
                ec, ax2, ay2, az2 = pair(x2, y2, z2, p, s2)
                ed, ax3, ay3, az3 = pair(x3, y3, z3, p, s3)
                e0, e1, e2, e3 = e0 + ea, e1 + eb, e2 + ec, e3 + ed
                gx, gy, gz = -(ax0 + ax1 + ax2 + ax3), -(ay0 + ay1 + ay2 + ay3), -(az0 + az1 + az2 + az3)
                if WARP_SHUFFLES:  # the lanes at this place in every group of the warp share atom ip
                    gx, gy, gz = warp_sum(gx, lanes), warp_sum(gy, lanes), warp_sum(gz, lanes)
                if ip < natpro and (not WARP_SHUFFLES or cuda.laneid < lanes):
                    cuda.atomic.add(grad, (0, ip), gx)
                    cuda.atomic.add(grad, (1, ip), gy)
                    cuda.atomic.add(grad, (2, ip), gz)
        e0, e1, e2, e3 = (
            group_sum(e0, lanes),
            group_sum(e1, lanes),
            group_sum(e2, lanes),
            group_sum(e3, lanes),
        )
        if lane == 0:
            for k, e in enumerate((e0, e1, e2, e3)):
                if first + k < n:
                    energies[first + k] = e

    return fused


def launch(kernel: Any, lanes: int, protein_xyz: Any, ligand_xyz: Any, ligand_type: Any, coef: Any, poses: Any,
           seed: Any, energies: Any, grad: Any) -> None:  # fmt: skip
    """One evaluation: ``energies`` set, ``grad`` (3, natpro) += the gradient of ``sum(seed * energies)``."""
    threads = -(-poses.shape[1] // POSES) * lanes
    block = threads if config.ENABLE_CUDASIM else 128  # type: ignore[attr-defined]  # (simulated: no spare threads)
    kernel[-(-threads // block), block](
        lanes, protein_xyz, ligand_xyz, ligand_type, coef, poses, seed, energies, grad
    )


def main(argv: list[str] | None = None) -> int:
    import cupy as cp

    from apps.minibude.deck import find_deck, read_deck
    from apps.minibude.driver import Docking
    from pad.parallel.gpu import lanes_per_index

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("deck", nargs="?", default="bm1", help="deck directory, or bm1 (default)")
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--lanes", type=int, help="lanes per work item (default: pad's choice)")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)

    deck = read_deck(find_deck(args.deck))
    dock = Docking(deck, ppwi=POSES, device="gpu")
    n = dock.poses.shape[1]
    lanes = args.lanes or lanes_per_index(-(-n // POSES))

    def timed(f: Any) -> float:
        """Seconds per call, timed as the app times its own (``Docking.timed``: after a warm-up)."""
        return dock.timed(f, args.iterations, lambda _: None)

    seed = cp.ones(n, np.float32)
    energies, grad = cp.zeros(n, np.float32), cp.zeros_like(dock.protein_xyz)
    out: dict[str, Any] = {
        "benchmark": "minibude_hand",
        "machine": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
        "deck": args.deck,
        "nposes": n,
        "lanes": lanes,
        "iterations": args.iterations,
        "energies_s": timed(dock.score),
        "pad_gradient_s": timed(lambda: dock.gradient("protein")),
    }
    want_e, want_g = cp.asnumpy(dock.score()).copy(), cp.asnumpy(dock.gradient("protein"))
    ok = True
    for kink in KINKS:
        kernel = make_kernel(kink)

        def run(kernel: Any = kernel) -> None:
            grad[...] = 0
            launch(kernel, lanes, dock.protein_xyz, dock.ligand_xyz, dock.ligand_type, dock.coef, dock.poses, seed,
                   energies, grad)  # fmt: skip

        out[f"hand_{kink}_s"] = timed(run)
        g_err = float(np.abs(cp.asnumpy(grad) - want_g).max() / np.abs(want_g).max())
        e_err = float(np.abs(cp.asnumpy(energies) - want_e).max() / np.abs(want_e).max())
        out[f"hand_{kink}_error"] = {"gradient": g_err, "energies": e_err}
        # "below" differs from pad's rule only at exact ties; float32 sums in another order differ ~1e-5
        ok &= g_err < 1e-3 and e_err < 1e-4
    for key in ("pad_gradient_s", *(f"hand_{k}_s" for k in KINKS)):
        out[key[: -len("_s")] + "_ratio"] = out[key] / out["energies_s"]
    out["valid"] = ok
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
