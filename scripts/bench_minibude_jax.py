"""The JAX peer for miniBUDE's GPU benchmark: the fasten energy written plainly in JAX (``jit``, float32).

Times the energies, d(sum)/d(protein coordinates) and d(energy)/d(poses) on a deck and prints one JSON object.
Usage: ``python scripts/bench_minibude_jax.py DECK_DIR [--iterations N]`` (on a machine with JAX).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from apps.minibude.deck import HBTYPE_E, HBTYPE_F, read_deck


def make_energy(deck: Any) -> Any:
    """The reference's formula, one ligand atom at a time (a scan), all poses x protein atoms at once."""
    import jax
    import jax.numpy as jnp

    ff = jnp.asarray(deck.ff_params)
    hb = jnp.asarray(deck.ff_hbtype)
    ptype, ltype = jnp.asarray(deck.protein_type), jnp.asarray(deck.ligand_type)
    lig = jnp.asarray(deck.ligand_xyz)
    f32 = jnp.float32

    def energies(protein_xyz: Any, poses: Any) -> Any:
        rx, ry, rz, tx, ty, tz = poses
        sx, cx, sy, cy, sz, cz = jnp.sin(rx), jnp.cos(rx), jnp.sin(ry), jnp.cos(ry), jnp.sin(rz), jnp.cos(rz)
        pp = ff[ptype]
        phb = hb[ptype]

        def one_ligand_atom(etot: Any, il: Any) -> tuple[Any, None]:
            ax, ay, az = lig[il, 0], lig[il, 1], lig[il, 2]
            lx = tx + ax * cy * cz + ay * (sx * sy * cz - cx * sz) + az * (cx * sy * cz + sx * sz)
            ly = ty + ax * cy * sz + ay * (sx * sy * sz + cx * cz) + az * (cx * sy * sz - sx * cz)
            lz = tz - ax * sy + ay * sx * cy + az * cx * cy
            lp = ff[ltype[il]]
            lhb = hb[ltype[il]]
            dx = lx[:, None] - protein_xyz[None, :, 0]
            dy = ly[:, None] - protein_xyz[None, :, 1]
            dz = lz[:, None] - protein_xyz[None, :, 2]
            d = jnp.sqrt(dx * dx + dy * dy + dz * dz)
            radij = pp[:, 0] + lp[0]
            distbb = d - radij
            zone1 = distbb < 0
            both_f = (phb == HBTYPE_F) & (lhb == HBTYPE_F)
            elcdst = jnp.where(both_f, f32(4), f32(2))
            elcdst1 = jnp.where(both_f, f32(0.25), f32(0.5))
            type_e = (phb == HBTYPE_E) | (lhb == HBTYPE_E)
            ph, lh = pp[:, 1], lp[1]
            p_hphb = jnp.where((ph < 0) & (lh > 0), -ph, ph)
            l_hphb = jnp.where((ph > 0) & (lh < 0), -lh, lh)
            big = f32(np.finfo(np.float32).max)
            distdslv = jnp.where(ph < 0, jnp.where(lh < 0, f32(5.5), f32(1)), jnp.where(lh < 0, f32(1), -big))
            steric = (1 - d / radij) * jnp.where(zone1, f32(76), f32(0))
            chrg = lp[2] * pp[:, 2] * jnp.where(zone1, f32(1), 1 - distbb * elcdst1) * (distbb < elcdst)
            chrg = jnp.where(type_e, -jnp.abs(chrg), chrg)
            dslv = (p_hphb + l_hphb) * ((distbb < distdslv) & (ph != 0))
            dslv = dslv * jnp.where(zone1, f32(1), 1 - distbb / distdslv)
            return etot + (steric + 45 * chrg + dslv).sum(axis=1), None

        etot, _ = jax.lax.scan(one_ligand_atom, jnp.zeros(poses.shape[1], f32), jnp.arange(lig.shape[0]))
        return 0.5 * etot

    return energies


def main() -> None:
    import jax
    import jax.numpy as jnp

    p = argparse.ArgumentParser()
    p.add_argument("deck")
    p.add_argument("--iterations", type=int, default=20)
    args = p.parse_args()
    deck = read_deck(args.deck)
    energies = make_energy(deck)
    protein, poses = jnp.asarray(deck.protein_xyz), jnp.asarray(deck.poses)
    runs = {
        "energies": jax.jit(energies),
        "grad_protein": jax.jit(jax.grad(lambda x, q: energies(x, q).sum(), argnums=0)),
        "grad_poses": jax.jit(jax.grad(lambda x, q: energies(x, q).sum(), argnums=1)),
    }
    result: dict[str, Any] = {"app": "minibude-jax", "device": str(jax.devices()[0]), "problem": deck.sizes()}
    for name, fn in runs.items():
        out = fn(protein, poses)
        out.block_until_ready()
        start = time.perf_counter()
        for _ in range(args.iterations):
            out = fn(protein, poses)
        out.block_until_ready()
        result[f"time_{name}_s"] = (time.perf_counter() - start) / args.iterations
        if name == "energies" and deck.ref_energies is not None:
            e, ref = np.asarray(out, np.float64), deck.ref_energies
            keep = (np.abs(ref) >= 1) | (np.abs(e) >= 1)
            result["max_rel_diff"] = float((np.abs(e - ref) / np.abs(ref))[keep].max())
    for name in ("grad_protein", "grad_poses"):
        result[f"overhead_{name}"] = result[f"time_{name}_s"] / result["time_energies_s"]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
