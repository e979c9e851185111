"""The JAX peer for miniBUDE's benchmark: the fasten energy as a JAX user writes it (``jit``, float32).

``energies`` loops over the ligand atoms in Python (unrolled when ``jit`` traces it). Per ligand atom it
broadcasts the protein, (natpro, 1), against the poses, (1, nposes), takes the reference's branches with
``jnp.where`` and sums over the protein axis. Gradients are ``jax.grad`` of the energies' sum with respect to
the protein coordinates, the poses and the forcefield. Times each and prints one JSON object.

Usage: ``python scripts/bench_minibude_jax.py DECK_DIR [--poses N] [--iterations N] [--check] [--json PATH]``. ``--check``
compares the energies and gradients with pad's (CPU threads) and fails on a mismatch.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from apps.cli import warm_up
from apps.minibude.deck import HBTYPE_E, HBTYPE_F, Deck, read_deck

HARDNESS, NPNPDIST, NPPDIST, CNSTNT = 38.0, 5.5, 1.0, 45.0


def make_energies(deck: Deck) -> Any:
    """``energies(protein (natpro, 3), poses (6, nposes), ff_params (ntypes, 3))`` -> (nposes,) float32."""
    import jax.numpy as jnp

    ptype, hb = deck.protein_type, deck.ff_hbtype
    phb = hb[ptype][:, None]  # (natpro, 1): types are data, not differentiated
    big = np.finfo(np.float32).max

    def energies(protein: Any, poses: Any, ff: Any) -> Any:
        rx, ry, rz, tx, ty, tz = poses[:, None, :]  # each (1, nposes)
        sx, cx, sy, cy, sz, cz = jnp.sin(rx), jnp.cos(rx), jnp.sin(ry), jnp.cos(ry), jnp.sin(rz), jnp.cos(rz)
        px, py, pz = protein[:, 0:1], protein[:, 1:2], protein[:, 2:3]  # each (natpro, 1)
        pp = ff[ptype][:, None, :]  # (natpro, 1, 3): radius, hphb, elsc
        ph = pp[..., 1]
        etot = jnp.zeros(poses.shape[1], jnp.float32)
        for il in range(deck.natlig):  # unrolled at trace time
            ax, ay, az = (float(v) for v in deck.ligand_xyz[il])
            lt = int(deck.ligand_type[il])
            lp, lhb = ff[lt], hb[lt]
            lx = tx + ax * cy * cz + ay * (sx * sy * cz - cx * sz) + az * (cx * sy * cz + sx * sz)
            ly = ty + ax * cy * sz + ay * (sx * sy * sz + cx * cz) + az * (cx * sy * sz - sx * cz)
            lz = tz - ax * sy + ay * sx * cy + az * cx * cy
            d = jnp.sqrt((lx - px) ** 2 + (ly - py) ** 2 + (lz - pz) ** 2)  # (natpro, nposes)
            radij = pp[..., 0] + lp[0]
            distbb = d - radij
            zone1 = distbb < 0
            both_f = (phb == HBTYPE_F) & (lhb == HBTYPE_F)
            elcdst = jnp.where(both_f, 4.0, 2.0)
            elcdst1 = jnp.where(both_f, 0.25, 0.5)
            type_e = (phb == HBTYPE_E) | (lhb == HBTYPE_E)
            lh = lp[1]
            p_hphb = jnp.where((ph < 0) & (lh > 0), -ph, ph)
            l_hphb = jnp.where((ph > 0) & (lh < 0), -lh, lh)
            distdslv = jnp.where(
                ph < 0, jnp.where(lh < 0, NPNPDIST, NPPDIST), jnp.where(lh < 0, NPPDIST, -big)
            )
            steric = jnp.where(zone1, (1 - d / radij) * (2 * HARDNESS), 0.0)
            chrg = lp[2] * pp[..., 2] * jnp.where(zone1, 1.0, 1 - distbb * elcdst1)
            chrg = jnp.where(distbb < elcdst, jnp.where(type_e, -jnp.abs(chrg), chrg), 0.0)
            dslv = jnp.where(
                (distbb < distdslv) & (ph != 0),
                (p_hphb + l_hphb) * jnp.where(zone1, 1.0, 1 - distbb / distdslv),
                0.0,
            )
            etot = etot + (steric + CNSTNT * chrg + dslv).sum(axis=0)
        return 0.5 * etot

    return energies


def timed(fn: Any, args: tuple, iterations: int) -> float:
    """Mean seconds per call after a warm-up call (which compiles) and half a second of calls (as the
    apps time GPU runs: clocks rise under load)."""
    import jax

    def seconds(calls: int) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            out = fn(*args)
        jax.block_until_ready(out)
        return time.perf_counter() - start

    seconds(1)
    warm_up(seconds)
    return seconds(iterations) / iterations


def check_against_pad(deck: Deck, results: dict[str, np.ndarray]) -> dict[str, float]:
    """Largest differences from pad's energies and gradients, relative to each array's largest magnitude."""
    from apps.minibude.driver import Docking

    dock = Docking(deck)
    mine: dict[str, Any] = {"energies": np.asarray(dock.score()).copy()}
    for wrt in ("protein", "poses", "forcefield"):
        mine[f"grad_{wrt}"] = dock.reduced_gradient(wrt, dock.gradient(wrt))
    layout = {"grad_poses": np.transpose}  # pad: (nposes, 6); here (6, nposes)
    return {
        name: float(np.abs(layout.get(name, np.asarray)(mine[name]) - got).max() / np.abs(got).max())
        for name, got in results.items()
    }


def main() -> int:
    import jax
    import jax.numpy as jnp

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("deck")
    p.add_argument("--poses", type=int, default=0, help="the deck's first N poses (default: all)")
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--check", action="store_true", help="compare with pad's energies and gradients")
    p.add_argument("--json", metavar="PATH", help="also write the results here")
    args = p.parse_args()
    deck = read_deck(args.deck)
    if args.poses:
        deck = deck.first(args.poses)
    energies = make_energies(deck)
    inputs = (jnp.asarray(deck.protein_xyz), jnp.asarray(deck.poses), jnp.asarray(deck.ff_params))

    def total(*xs: Any) -> Any:
        return energies(*xs).sum()

    runs = {
        "energies": jax.jit(energies),
        "grad_protein": jax.jit(jax.grad(total, argnums=0)),
        "grad_poses": jax.jit(jax.grad(total, argnums=1)),
        "grad_forcefield": jax.jit(jax.grad(total, argnums=2)),
    }
    result: dict[str, Any] = {"app": "minibude-jax", "device": str(jax.devices()[0]), "problem": deck.sizes()}
    outputs = {}
    for name, fn in runs.items():
        result[f"time_{name}_s"] = timed(fn, inputs, args.iterations)
        outputs[name] = np.asarray(fn(*inputs), np.float64)
    if deck.ref_energies is not None:
        e, ref = outputs["energies"], deck.ref_energies
        keep = (np.abs(ref) >= 1) | (np.abs(e) >= 1)
        result["max_rel_diff"] = float((np.abs(e - ref) / np.abs(ref))[keep].max())
    for name in ("grad_protein", "grad_poses", "grad_forcefield"):
        result[f"overhead_{name}"] = result[f"time_{name}_s"] / result["time_energies_s"]
    if args.check:
        result["diff_from_pad"] = check_against_pad(deck, outputs)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 1 if args.check and max(result["diff_from_pad"].values()) > 2e-3 else 0


if __name__ == "__main__":
    sys.exit(main())
