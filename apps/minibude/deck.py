"""miniBUDE decks: the binary input formats, a deterministic synthetic deck, and reference energies.

A deck directory holds four little-endian files of packed 16-byte records (and optionally the reference
energies, one per line):

- ``protein.in``, ``ligand.in``: ``{float32 x, y, z; int32 type}`` per atom;
- ``forcefield.in``: ``{int32 hbtype; float32 radius, hphb, elsc}`` per atom type;
- ``poses.in``: six float32 arrays of length ``nposes`` one after the other (rx, ry, rz, tx, ty, tz);
- ``ref_energies.out``: the reference energy of every pose, one per line.

In memory a :class:`Deck` keeps plain arrays that kernels can index: coordinates ``(n, 3)`` float32,
types ``(n,)`` int32, forcefield ``hbtype`` ``(ntypes,)`` int32 and ``params`` ``(ntypes, 3)`` float32
(radius, hphb, elsc), and ``poses`` ``(6, nposes)`` float32.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import numpy as np

from apps.cli import InputError

__all__ = [
    "HBTYPE_E",
    "HBTYPE_F",
    "SHIPPED",
    "Deck",
    "InputError",
    "find_deck",
    "read_deck",
    "synthetic_deck",
    "write_deck",
]

HBTYPE_F = ord("F")
HBTYPE_E = ord("E")

SHIPPED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
"""The decks that come with pad (``bm1``), one directory each; see ``data/README.md`` for their origin."""

_ATOM = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("type", "<i4")])
_FFPARAM = np.dtype([("hbtype", "<i4"), ("radius", "<f4"), ("hphb", "<f4"), ("elsc", "<f4")])


@dataclass(frozen=True)
class Deck:
    """A docking problem: protein and ligand atoms, their forcefield, and the poses to score."""

    protein_xyz: np.ndarray  # (natpro, 3) float32
    protein_type: np.ndarray  # (natpro,) int32
    ligand_xyz: np.ndarray  # (natlig, 3) float32
    ligand_type: np.ndarray  # (natlig,) int32
    ff_hbtype: np.ndarray  # (ntypes,) int32, ASCII codes
    ff_params: np.ndarray  # (ntypes, 3) float32: radius, hphb, elsc
    poses: np.ndarray  # (6, nposes) float32: rx, ry, rz, tx, ty, tz
    ref_energies: np.ndarray | None = None  # (nposes,) float64, when the deck ships them
    name: str = "synthetic"

    @property
    def natpro(self) -> int:
        return int(self.protein_xyz.shape[0])

    @property
    def natlig(self) -> int:
        return int(self.ligand_xyz.shape[0])

    @property
    def ntypes(self) -> int:
        return int(self.ff_params.shape[0])

    @property
    def nposes(self) -> int:
        return int(self.poses.shape[1])

    def sizes(self) -> dict[str, int | str]:
        """The problem sizes, as reported in the JSON results."""
        return {
            "deck": self.name,
            "nposes": self.nposes,
            "natpro": self.natpro,
            "natlig": self.natlig,
            "ntypes": self.ntypes,
        }

    def first(self, n: int) -> Deck:
        """The same deck restricted to its first ``n`` poses."""
        if not 1 <= n <= self.nposes:
            raise InputError(f"--poses: asked for {n} poses, but deck {self.name} has {self.nposes}")
        ref = None if self.ref_energies is None else self.ref_energies[:n].copy()
        return replace(self, poses=np.ascontiguousarray(self.poses[:, :n]), ref_energies=ref)

    def validate(self, directory: str = "") -> None:
        """Check types index the forcefield; raise :class:`InputError` naming the offending file."""
        for name, types in (("protein.in", self.protein_type), ("ligand.in", self.ligand_type)):
            what = os.path.join(directory, name)
            if types.size and (types.min() < 0 or types.max() >= self.ntypes):
                bad = int(types[(types < 0) | (types >= self.ntypes)][0])
                raise InputError(
                    f"{what}: forcefield type index {bad} out of range "
                    f"(forcefield.in has {self.ntypes} types)"
                )


def _records(path: str, dtype: np.dtype, what: str) -> np.ndarray:
    if not os.path.isfile(path):
        raise InputError(f"{path}: missing deck file ({what})")
    size = os.path.getsize(path)
    if size == 0 or size % dtype.itemsize:
        raise InputError(
            f"{path}: truncated or corrupt: {size} bytes is not a whole number of "
            f"{dtype.itemsize}-byte records"
        )
    return np.fromfile(path, dtype=dtype)


def find_deck(deck: str) -> str:
    """The directory of ``deck``: a directory path, else the name of a deck shipped with pad (``bm1``)."""
    if os.path.isdir(deck):
        return deck
    shipped = os.path.join(SHIPPED, deck)
    if os.sep not in deck and os.path.isfile(os.path.join(shipped, "poses.in")):
        return shipped
    names = sorted(d for d in os.listdir(SHIPPED) if os.path.isfile(os.path.join(SHIPPED, d, "poses.in")))
    raise InputError(f"--deck: {deck} is neither a deck directory nor a shipped deck ({', '.join(names)})")


def read_deck(directory: str) -> Deck:
    """Read a deck directory; every problem raises :class:`InputError` naming the file."""
    if not os.path.isdir(directory):
        raise InputError(f"{directory}: deck directory not found")
    protein = _records(os.path.join(directory, "protein.in"), _ATOM, "protein atoms")
    ligand = _records(os.path.join(directory, "ligand.in"), _ATOM, "ligand atoms")
    ff = _records(os.path.join(directory, "forcefield.in"), _FFPARAM, "forcefield")
    poses_path = os.path.join(directory, "poses.in")
    flat = _records(poses_path, np.dtype("<f4"), "poses")
    if flat.size % 6:
        raise InputError(f"{poses_path}: {flat.size} floats is not six arrays of equal length (rx..tz)")
    poses = np.ascontiguousarray(flat.reshape(6, -1))
    ref = None
    ref_path = os.path.join(directory, "ref_energies.out")
    if os.path.isfile(ref_path):
        try:
            ref = np.loadtxt(ref_path, dtype=np.float64, ndmin=1)
        except ValueError as exc:
            raise InputError(f"{ref_path}: not one number per line ({exc})") from None
        if ref.size != poses.shape[1]:
            raise InputError(
                f"{ref_path}: {ref.size} reference energies, but poses.in holds {poses.shape[1]} poses"
            )
    deck = Deck(
        protein_xyz=_xyz(protein),
        protein_type=np.ascontiguousarray(protein["type"], dtype=np.int32),
        ligand_xyz=_xyz(ligand),
        ligand_type=np.ascontiguousarray(ligand["type"], dtype=np.int32),
        ff_hbtype=np.ascontiguousarray(ff["hbtype"], dtype=np.int32),
        ff_params=np.ascontiguousarray(np.stack([ff["radius"], ff["hphb"], ff["elsc"]], axis=1), np.float32),
        poses=poses,
        ref_energies=ref,
        name=os.path.basename(os.path.normpath(directory)),
    )
    deck.validate(directory)
    return deck


def _xyz(atoms: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.stack([atoms["x"], atoms["y"], atoms["z"]], axis=1), dtype=np.float32)


def write_deck(deck: Deck, directory: str) -> None:
    """Write ``deck`` in the binary formats (and its reference energies, if it has them)."""
    os.makedirs(directory, exist_ok=True)
    for name, xyz, types in (
        ("protein.in", deck.protein_xyz, deck.protein_type),
        ("ligand.in", deck.ligand_xyz, deck.ligand_type),
    ):
        rec = np.empty(len(types), _ATOM)
        rec["x"], rec["y"], rec["z"] = xyz[:, 0], xyz[:, 1], xyz[:, 2]
        rec["type"] = types
        rec.tofile(os.path.join(directory, name))
    ff = np.empty(deck.ntypes, _FFPARAM)
    ff["hbtype"] = deck.ff_hbtype
    ff["radius"], ff["hphb"], ff["elsc"] = deck.ff_params[:, 0], deck.ff_params[:, 1], deck.ff_params[:, 2]
    ff.tofile(os.path.join(directory, "forcefield.in"))
    deck.poses.astype("<f4").tofile(os.path.join(directory, "poses.in"))
    if deck.ref_energies is not None:
        np.savetxt(os.path.join(directory, "ref_energies.out"), deck.ref_energies, fmt="%.6f")


def synthetic_deck(
    nposes: int = 4096, natpro: int = 938, natlig: int = 26, ntypes: int = 34, seed: int = 1
) -> Deck:
    """A deterministic deck with bm1's sizes and value ranges (a globular protein, a small ligand near it).

    Forcefield radii lie in [1.4, 2.1], hydrophobicities in [-0.8, 2.6] with some zeros, charges in
    [-0.8, 0.8] with zeros and a few of -1, 1, 2; hbtypes mix 'F', 'E', 'D' and '-'. Poses rotate by angles
    in [-pi, pi] and translate by up to 7 Angstrom, as bm1's do.
    """
    rng = np.random.default_rng(seed)
    ff_hbtype = rng.choice(np.array([ord("-"), HBTYPE_F, HBTYPE_E, ord("D")], np.int32), ntypes)
    radius = rng.uniform(1.4, 2.1, ntypes)
    hphb = np.where(rng.random(ntypes) < 0.2, 0.0, rng.uniform(-0.8, 2.6, ntypes))
    elsc = np.where(rng.random(ntypes) < 0.4, 0.0, rng.uniform(-0.8, 0.8, ntypes))
    elsc[rng.random(ntypes) < 0.1] = rng.choice([-1.0, 1.0, 2.0])
    ff_params = np.stack([radius, hphb, elsc], axis=1).astype(np.float32)
    # Protein: atoms spread through a ball of radius 20 A centred 6 A below the origin, with a pocket of
    # radius 8.5 A around the origin where the ligand (centred there) docks; the poses' translations push it
    # into the pocket walls, giving bm1's spread of energies (about a tenth of them negative).
    centre = np.array([0.0, 0.0, -6.0])
    atoms = np.empty((0, 3))
    while len(atoms) < natpro:
        cand = rng.uniform(-20.0, 20.0, (4 * natpro, 3))
        cand = cand[np.linalg.norm(cand, axis=1) < 20.0] + centre
        atoms = np.concatenate([atoms, cand[np.linalg.norm(cand, axis=1) > 8.5]])
    protein_xyz = atoms[:natpro].astype(np.float32)
    ligand = rng.normal(scale=2.0, size=(natlig, 3))
    ligand_xyz = (ligand - ligand.mean(axis=0)).astype(np.float32)
    angles = rng.uniform(-np.pi, np.pi, (3, nposes))
    shifts = rng.uniform(-7.0, 7.0, (3, nposes))
    return Deck(
        protein_xyz=protein_xyz,
        protein_type=rng.integers(0, ntypes, natpro, dtype=np.int32),
        ligand_xyz=ligand_xyz,
        ligand_type=rng.integers(0, ntypes, natlig, dtype=np.int32),
        ff_hbtype=ff_hbtype,
        ff_params=ff_params,
        poses=np.ascontiguousarray(np.concatenate([angles, shifts]).astype(np.float32)),
        name="synthetic",
    )
