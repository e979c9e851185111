"""LULESH's mesh and its decomposition: built once on the host, read by the kernels, never differentiated.

One rank holds an ``nx``-cube of hexahedral elements (``(nx + 1)**3`` nodes) of a ``(tp * nx)``-cube mesh
over ``[0, 1.125]**3``, ``tp**3`` ranks in all. Nodes are numbered ``(plane * (nx+1) + row) * (nx+1) + col``
and elements ``(plane * nx + row) * nx + col``, as the original numbers them; ``plane, row, col`` are z, y, x.

Element-centred arrays that monotonic Q reads at neighbours (``delv``) have, after the rank's elements, one
``nx * nx`` block per face: a ghost block per face neighbour (in the original's order: plane min, plane max,
row min, row max, col min, col max), then a zero block per free surface, which nothing writes. Each
element's six neighbour pointers ``neighbours[:, d]`` point at the neighbouring element, at a ghost slot (a
neighbour rank's element), at the element itself (a symmetry plane) or at its own zero slot (the free
surface): the original's boundary condition masks, resolved once. Zero slots of their own, rather than one
that every free-surface element reads, leave the adjoint's adds to them apart, so its scatter runs in
parallel colours like the rest (pad/parallel/plans.py), and a GPU's atomic adds do not queue at one
address.

Regions are drawn as the original draws them, with C's ``rand()`` after ``srand(rank)``
(:class:`GlibcRand` reproduces glibc's generator), so ``-r``, ``-b`` and ``-c`` give the original's work.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from apps.cli import InputError

INDEX = np.int32

FACES = ((-1, 0, 0), (1, 0, 0), (0, -1, 0), (0, 1, 0), (0, 0, -1), (0, 0, 1))
"""Face neighbours as (plane, row, col) offsets, in the original's order of ghost blocks."""


class GlibcRand:
    """glibc's ``srand(seed); rand()`` (the TYPE_3 additive feedback generator), bit for bit."""

    def __init__(self, seed: int) -> None:
        r = [seed or 1]  # glibc treats seed 0 as 1
        for _ in range(30):
            hi, lo = divmod(r[-1], 127773)
            word = 16807 * lo - 2836 * hi
            r.append(word + 2147483647 if word < 0 else word)
        r += r[:3]
        for i in range(34, 344):
            r.append((r[i - 31] + r[i - 3]) & 0xFFFFFFFF)
        self._r = r[-34:]
        self._k = 0  # _r is a ring: _r[_k] is the oldest of the last 34 values

    def __call__(self) -> int:
        r, k = self._r, self._k
        value = (r[(k + 3) % 34] + r[(k + 31) % 34]) & 0xFFFFFFFF
        r[k] = value
        self._k = (k + 1) % 34
        return value >> 1


def decompose(size: int, rank: int) -> tuple[int, int, int, int]:
    """``(tp, plane, row, col)``: ranks form a ``tp``-cube, rank = (plane * tp + row) * tp + col."""
    tp = round(size ** (1 / 3))
    if tp**3 != size:
        raise InputError(f"the number of MPI ranks must be a cube of an integer (1, 8, 27, ...), got {size}")
    return tp, rank // (tp * tp), (rank // tp) % tp, rank % tp


def region_numbers(nelem: int, nregions: int, balance: int, rank: int) -> np.ndarray:
    """The region (1-based) of each element, drawn as the original draws it."""
    numbers = np.ones(nelem, INDEX)
    if nregions == 1:
        return numbers
    rand = GlibcRand(rank)
    bin_end = np.cumsum([(i + 1) ** balance for i in range(nregions)])
    total = int(bin_end[-1])

    def draw() -> int:
        var = rand() % total
        return (int(np.searchsorted(bin_end, var, side="right")) + rank) % nregions + 1

    sizes = ((773, 15, 1), (937, 16, 16), (970, 32, 32), (974, 64, 64), (978, 128, 128), (981, 256, 256))
    start, last = 0, -1
    while start < nelem:
        region = draw()
        while region == last:
            region = draw()
        size = rand() % 1000
        count = next((rand() % span + low for bound, span, low in sizes if size < bound), None)
        if count is None:
            count = rand() % 1537 + 512
        numbers[start : start + count] = region
        start += count
        last = region
    return numbers


def repetitions(region: np.ndarray, nregions: int, cost: int) -> np.ndarray:
    """How many times the EOS runs for each element: cheap, costly and very costly regions as the original."""
    r = region - 1
    rep = np.where(
        r < nregions // 2, 1, np.where(r < nregions - (nregions + 15) // 20, 1 + cost, 10 * (1 + cost))
    )
    return rep.astype(INDEX)


@dataclass
class Mesh:
    """One rank's block: connectivity, boundary conditions, regions, the initial coordinates and halos."""

    nx: int
    tp: int
    plane: int
    row: int
    col: int
    nodelist: np.ndarray  # (8, nelem) the element's corners, in the original's order
    corner_start: (
        np.ndarray
    )  # (nnode + 1,) node n's corners are corner_list[corner_start[n]:corner_start[n+1]]
    corner_list: np.ndarray  # corners local corner * nelem + element, by node, then by element (see Hydro)
    neighbours: np.ndarray  # (6, nelem) xi-, xi+, eta-, eta+, zeta-, zeta+ pointers into a delv array
    symmetry: np.ndarray  # (3, nnode) 1 where the node is on the x, y or z = 0 symmetry plane
    region: np.ndarray  # (nelem,) region number, 1-based
    rep: np.ndarray  # (nelem,) EOS repetitions
    coords: np.ndarray  # (3, nnode) initial x, y, z
    face_links: list  # monotonic Q's ghost exchange: (rank, send elements, ghost slots, tags)
    ndelv: int  # length of a ``delv`` array: elements, ghost blocks, zero blocks

    @property
    def nelem(self) -> int:
        return self.nx**3

    @property
    def nnode(self) -> int:
        return (self.nx + 1) ** 3

    @property
    def at_origin(self) -> bool:
        return self.plane == self.row == self.col == 0

    def global_nodes(self) -> np.ndarray:
        """Each node's number in the whole ``(tp * nx + 1)``-cube of nodes."""
        nn, g = self.nx + 1, self.tp * self.nx + 1
        k, j, i = (a.ravel() for a in np.meshgrid(*(np.arange(nn),) * 3, indexing="ij"))
        k, j, i = k + self.plane * self.nx, j + self.row * self.nx, i + self.col * self.nx
        return (k * g + j) * g + i

    def global_elements(self) -> np.ndarray:
        """Each element's number in the whole ``(tp * nx)``-cube of elements."""
        n, g = self.nx, self.tp * self.nx
        k, j, i = (a.ravel() for a in np.meshgrid(*(np.arange(n),) * 3, indexing="ij"))
        k, j, i = k + self.plane * n, j + self.row * n, i + self.col * n
        return (k * g + j) * g + i

    def owned_nodes(self) -> np.ndarray:
        """Whether this rank owns each node: of the ranks sharing a node, the highest (whose copy the
        position halo spreads) owns it, so every node of the whole mesh has exactly one owner."""
        nx, last = self.nx, self.tp - 1
        k, j, i = (a.ravel() for a in np.meshgrid(*(np.arange(nx + 1),) * 3, indexing="ij"))
        return (
            ((k < nx) | (self.plane == last))
            & ((j < nx) | (self.row == last))
            & ((i < nx) | (self.col == last))
        )


def build(nx: int, size: int, rank: int, nregions: int, balance: int, cost: int) -> Mesh:
    """The block of rank ``rank`` of ``size`` ranks, ``nx`` elements along each side."""
    tp, plane, row, col = decompose(size, rank)
    loc = np.array([plane, row, col])
    e, nn = nx, nx + 1
    k, j, i = np.meshgrid(np.arange(nn), np.arange(nn), np.arange(nn), indexing="ij")
    coords = np.empty((3, nn**3))
    for axis, (local, block) in enumerate(((i, col), (j, row), (k, plane))):
        coords[axis] = 1.125 * (block * nx + local.ravel()).astype(np.float64) / np.float64(tp * nx)

    ek, ej, ei = (a.ravel() for a in np.meshgrid(np.arange(e), np.arange(e), np.arange(e), indexing="ij"))
    base = (ek * nn + ej) * nn + ei
    offsets = np.array([0, 1, nn + 1, nn, nn * nn, nn * nn + 1, nn * nn + nn + 1, nn * nn + nn])
    # Arrays of the elements' corners are corner-major, (8, nelem): on a GPU, neighbouring threads
    # (elements, or nodes gathering the same corner of neighbouring elements) then read neighbouring words.
    nodelist = (base[None, :] + offsets[:, None]).astype(INDEX)

    nelem = e**3
    corners = nodelist.T.ravel()  # element by element
    order = np.argsort(corners, kind="stable")  # by node, then by element
    corner_list = ((order % 8) * nelem + order // 8).astype(INDEX)
    corner_start = np.zeros(nn**3 + 1, INDEX)
    np.cumsum(np.bincount(corners, minlength=nn**3), out=corner_start[1:])

    elem = np.arange(nelem)
    face_links = []
    block = nelem
    ghost_base, zero_base = {}, {}
    for d, off in enumerate(FACES):
        where = loc + off
        if np.all((where >= 0) & (where < tp)):
            ghost_base[d] = block
            block += e * e
    for d, off in enumerate(FACES):
        if d not in ghost_base and max(off) > 0:
            zero_base[d] = block
            block += e * e
    position = (ek, ej, ei)
    neighbours = np.empty((6, nelem), INDEX)
    for d, (axis, sign) in enumerate(((2, -1), (2, 1), (1, -1), (1, 1), (0, -1), (0, 1))):
        face = FACES.index(tuple(sign if a == axis else 0 for a in range(3)))
        stride = e ** (2 - axis)
        inside = position[axis] > 0 if sign < 0 else position[axis] < e - 1
        others = [position[a] for a in range(3) if a != axis]
        slot = others[0] * e + others[1]
        if face in ghost_base:
            boundary = ghost_base[face] + slot
        elif sign < 0:
            boundary = elem  # symmetry plane: the element itself
        else:
            boundary = zero_base[face] + slot  # free surface: the element's own slot that holds zero
        neighbours[d] = np.where(inside, elem + sign * stride, boundary)
    for face, base_slot in ghost_base.items():
        off = FACES[face]
        axis = next(a for a in range(3) if off[a])
        on_side = position[axis] == (0 if off[axis] < 0 else e - 1)
        send = elem[on_side]  # boundary elements in C order of the two other coordinates
        neighbour = int(np.ravel_multi_index(tuple(loc + off), (tp, tp, tp)))
        ghosts = slice(base_slot, base_slot + e * e)
        face_links.append((neighbour, send.astype(INDEX), ghosts, face, face ^ 1))

    symmetry = np.zeros((3, nn**3), np.int8)
    symmetry[0] = (col == 0) & (i.ravel() == 0)
    symmetry[1] = (row == 0) & (j.ravel() == 0)
    symmetry[2] = (plane == 0) & (k.ravel() == 0)

    region = region_numbers(nelem, nregions, balance, rank)
    return Mesh(
        nx=nx,
        tp=tp,
        plane=plane,
        row=row,
        col=col,
        nodelist=nodelist,
        corner_start=corner_start,
        corner_list=corner_list,
        neighbours=neighbours,
        symmetry=symmetry,
        region=region,
        rep=repetitions(region, nregions, cost),
        coords=coords,
        face_links=face_links,
        ndelv=block,
    )
