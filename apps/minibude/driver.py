"""Drivers: a deck placed on CPU threads or a GPU, its poses split over MPI ranks, energies and gradients.

Each rank scores a contiguous share of the poses. Energies and pose gradients are gathered to rank 0;
gradients with respect to data every rank shares (protein coordinates, forcefield) are the sums of the ranks'
gradients of their own poses' energies, reduced with an allreduce. CuPy is imported only for ``device="gpu"``.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import pad
from apps.cli import DeviceNeed, InputError, Memory, warm_up
from apps.minibude.deck import Deck
from apps.minibude.kernels import NCOEF, fasten, fasten_x4, pair_coefficients

__all__ = ["TOLERANCE", "WRT", "Docking", "verify"]

WRT = ("protein", "poses", "forcefield")
TOLERANCE = 2.5e-4  # the reference's validity threshold: 0.025 %
TAPE_BYTES = 14 * 8 * 16
"""Adjoint tape bytes per work item on a GPU for the poses' gradient: 14 float64 values a lane (the fused
``fasten_x4`` adjoint's, counted on numba's simulator), at most 16 lanes a work item. The other gradients'
plain adjoints keep no tape."""


def device_bytes(deck: Deck, nlocal: int, ppwi: int, wrt: str | None) -> int:
    """Device memory one rank's ``Docking`` of ``nlocal`` poses allocates (estimated from the sizes): the deck
    (protein atoms with their pair coefficients, ligand, forcefield), its poses and energies, and, for a
    gradient with respect to ``wrt``, the gradient, the energies' seed and the adjoint's tape."""
    f4 = 4  # float32 and int32
    total = f4 * (deck.natpro * (4 + NCOEF * deck.ntypes) + 4 * deck.natlig + 4 * deck.ntypes + 7 * nlocal)
    if wrt is None:
        return total
    shadow = {
        "protein": 3 * deck.natpro,
        "poses": 6 * nlocal,
        "forcefield": 3 * deck.ntypes + NCOEF * deck.ntypes * deck.natpro,
    }[wrt]
    tape = -(-nlocal // ppwi) * TAPE_BYTES if wrt == "poses" else 0
    return total + f4 * (shadow + nlocal) + tape


def _share(n: int, rank: int, size: int) -> tuple[int, int]:
    """The contiguous range of ``n`` items that ``rank`` of ``size`` owns."""
    base, extra = divmod(n, size)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


class Docking:
    """A deck on one device, holding this rank's poses, ready to score and differentiate.

    ``comm`` is an mpi4py communicator or ``None`` for a single process; ``wrt`` the gradient the run will
    take (``None``: energies only), for the estimate of its device memory.
    """

    def __init__(
        self, deck: Deck, ppwi: int = 64, device: str = "cpu", comm: Any = None, wrt: str | None = None
    ) -> None:
        if ppwi < 1:
            raise InputError(f"--ppwi: {ppwi} must be at least 1")
        self.deck, self.ppwi, self.device, self.comm = deck, ppwi, device, comm
        self.rank = comm.Get_rank() if comm is not None else 0
        self.size = comm.Get_size() if comm is not None else 1
        if self.size > deck.nposes:
            raise InputError(f"mpiexec -n {self.size}: more MPI ranks than poses ({deck.nposes})")
        self.lo, self.hi = _share(deck.nposes, self.rank, self.size)
        need = DeviceNeed(
            device_bytes(deck, self.hi - self.lo, ppwi, wrt),
            f"miniBUDE {self.hi - self.lo} poses" + (f", gradient wrt {wrt}" if wrt else ""),
        )
        self.memory = Memory(device, comm, simulator=False, needs=need)  # CuPy arrays; GPUs round-robin
        xp = self.xp = self.memory.module
        # Private copies (xp.array copies): drivers move poses and perturb inputs in place.
        self.protein_xyz = xp.array(np.ascontiguousarray(deck.protein_xyz.T))  # (3, natpro)
        self.protein_type = xp.array(deck.protein_type)
        self.ligand_xyz = xp.array(deck.ligand_xyz)
        self.ligand_type = xp.array(deck.ligand_type)
        self.ff_hbtype = xp.array(deck.ff_hbtype)
        self.ff_params = xp.array(deck.ff_params)
        self.poses = xp.array(np.ascontiguousarray(deck.poses[:, self.lo : self.hi]))
        self.coef = xp.zeros((deck.ntypes, NCOEF, deck.natpro), np.float32)
        self.energies = xp.zeros(self.hi - self.lo, np.float32)
        self.compile_s = 0.0  # see timed
        self._gradients: dict[str, tuple[Any, tuple[Any, ...]]] = {}  # see gradient
        self.update_coefficients()

    # -- launches ---------------------------------------------------------------------------------------
    @property
    def nlocal(self) -> int:
        return self.hi - self.lo

    def update_coefficients(self) -> None:
        """Recompute the pair coefficients (after the forcefield changed)."""
        _coefficients(self.ff_hbtype, self.ff_params, self.protein_type, self.coef)

    def _fasten(self, protein_xyz: Any, ligand_xyz: Any, coef: Any, poses: Any, energies: Any) -> None:
        blocks = (poses.shape[1] + self.ppwi - 1) // self.ppwi
        args = (protein_xyz, ligand_xyz, self.ligand_type, coef, poses, energies)
        # Four poses per pass over the protein where a work item has four or more (the defaults: 64 on CPUs,
        # 4 on GPUs, one work item per CUDA thread);
        # one pose at a time otherwise.
        pad.launch(fasten_x4 if self.ppwi >= 4 else fasten, blocks, self.ppwi, *args)

    def score(self) -> Any:
        """This rank's pose energies (on the device)."""
        self._fasten(self.protein_xyz, self.ligand_xyz, self.coef, self.poses, self.energies)
        return self.energies

    def sync(self) -> None:
        """Wait for the device (timings)."""
        self.memory.sync()

    # -- gradients --------------------------------------------------------------------------------------
    def gradient(self, wrt: str) -> Any:
        """This rank's gradient of the sum of its energies (on the device), before any reduction.

        ``protein``: (3, natpro) like ``self.protein_xyz``; ``poses``: (6, nlocal), each pose's own
        gradient since poses are independent; ``forcefield``: (ntypes, 3) for radius, hphb, elsc.
        Each kind is one ``pad.graph`` step, recorded on its first call and replayed after (on a GPU one
        CUDA graph), with the shadows this ``Docking`` keeps for it: what a call costs besides its kernels
        does not shrink with a rank's share of the poses. Returns a copy of the gradient.
        """
        if wrt not in WRT:
            raise InputError(f"--wrt: {wrt!r} is not one of {', '.join(WRT)}")
        step = self._gradients.get(wrt)
        if step is None:
            xp = self.xp
            grad = xp.zeros_like(
                {"protein": self.protein_xyz, "poses": self.poses, "forcefield": self.ff_params}[wrt]
            )
            shadows: tuple[Any, ...] = (grad, xp.ones(self.nlocal, np.float32))
            if wrt == "forcefield":  # and the shadow of the coefficients, which its adjoint goes through
                shadows += (xp.zeros_like(self.coef),)
            step = self._gradients[wrt] = (pad.graph(functools.partial(self._differentiate, wrt)), shadows)
        graph, shadows = step
        graph(
            self.protein_xyz, self.ligand_xyz, self.ff_params, self.coef, self.poses, self.energies, *shadows
        )
        return shadows[0].copy()

    def _differentiate(
        self, wrt: str, protein_xyz: Any, ligand_xyz: Any, ff_params: Any, coef: Any, poses: Any, energies: Any,
        grad: Any, seed: Any, dcoef: Any = None,
    ) -> None:  # fmt: skip
        """``gradient``'s step: the shadows set, then ``autodiff`` of the energies with respect to ``wrt``.
        Every float array is passed to ``pad.autodiff`` (as ``Const`` unless differentiated): an array a
        differentiated function reaches any other way would count as active and cost adjoint work.

        The energies, which ``score`` makes, are a ``DupNoNeed``: the fasten launch's adjoint runs alone, not
        making them. Not for the poses' gradient, whose fused adjoint gives each pose the same value wherever
        it falls among the four poses of a pass, so that any rank count gives the serial values (L-BFGS's
        line search would take other steps): the plain adjoint's fast-math code rounds a pose's sums by
        its slot (up to 1e-7 relative)."""
        pad.fill(grad, 0.0)
        pad.fill(seed, 1.0)  # the adjoint consumes its seeds
        energies_seed = (pad.Dup if wrt == "poses" else pad.DupNoNeed)(energies, seed)

        def active(name: str, value: Any) -> Any:
            return pad.Dup(value, grad) if name == wrt else pad.Const(value)

        ligand = pad.Const(ligand_xyz)
        if wrt == "forcefield":

            def energy_of_forcefield(ff_params: Any, coef: Any, *rest: Any) -> None:
                _coefficients(self.ff_hbtype, ff_params, self.protein_type, coef)
                protein_xyz, ligand_xyz, poses, energies = rest
                self._fasten(protein_xyz, ligand_xyz, coef, poses, energies)

            pad.fill(dcoef, 0.0)
            pad.autodiff(
                energy_of_forcefield,
                active("forcefield", ff_params),
                pad.Dup(coef, dcoef),
                pad.Const(protein_xyz),
                ligand,
                pad.Const(poses),
                energies_seed,
                fuse=True,
            )
        else:
            protein, poses_ = active("protein", protein_xyz), active("poses", poses)
            pad.autodiff(self._fasten, protein, ligand, pad.Const(coef), poses_, energies_seed, fuse=True)

    # -- results over ranks -----------------------------------------------------------------------------
    def gather_energies(self) -> np.ndarray | None:
        """A copy of all energies on rank 0 (``None`` elsewhere), as a float32 host array."""
        return self._gather(self.memory.get(self.energies).copy())

    def reduced_gradient(self, wrt: str, grad: Any) -> np.ndarray | None:
        """The full gradient on rank 0 in API.md's layout: (natpro, 3), (nposes, 6) or (ntypes, 3)."""
        host = self.memory.get(grad)
        if wrt == "protein":
            host = np.ascontiguousarray(host.T)
        if wrt == "poses":
            rows = self._gather(np.ascontiguousarray(host.T).ravel())
            return None if rows is None else rows.reshape(-1, 6)
        if self.comm is None:
            return host
        total = np.empty_like(host)
        self.comm.Allreduce(host, total)
        return total if self.rank == 0 else None

    def _gather(self, local: np.ndarray) -> np.ndarray | None:
        if self.comm is None:
            return local
        counts = self.comm.allgather(local.size)
        out = np.empty(sum(counts), local.dtype) if self.rank == 0 else None
        self.comm.Gatherv(local, [out, counts] if self.rank == 0 else None, root=0)
        return out

    # -- measurement ------------------------------------------------------------------------------------
    def timed(self, step: Callable[[], Any], iterations: int, progress: Callable[[int], None]) -> float:
        """Wall-clock seconds per call of ``step``, the slowest rank's, after one warm-up call (which
        compiles) and on GPUs after ``apps.cli.GPU_WARM_S`` of calls (clocks rise under load). Adds the
        warm-up call's seconds beyond a timed call's, compiling or loading its kernels, to ``compile_s``."""
        warm = self._seconds(step, 1, lambda _: None)
        if self.device == "gpu":
            warm_up(lambda calls: calls * self._seconds(step, calls, lambda _: None))
        seconds = self._seconds(step, iterations, progress)
        self.compile_s += max(0.0, warm - seconds)
        return seconds

    def _seconds(self, step: Callable[[], Any], iterations: int, progress: Callable[[int], None]) -> float:
        if self.comm is not None:
            self.comm.Barrier()
        start = time.perf_counter()
        for _ in range(iterations):
            step()
            self.sync()
            progress(1)
        seconds = (time.perf_counter() - start) / iterations
        return max(self.comm.allgather(seconds)) if self.comm is not None else seconds

    # -- checks -----------------------------------------------------------------------------------------
    def finite_difference_check(self, wrt: str, grad: Any, count: int = 4) -> dict[str, Any]:
        """Compare ``count`` entries of the whole gradient with central differences of the sum of all energies.

        ``grad`` is this rank's gradient (``gradient(wrt)``). The whole gradient is every rank's: the sum over
        ranks for the protein and the forcefield, which every rank holds, and every pose's own for the poses.
        Every rank picks the same entries of it and moves them alike (a pose on the rank that holds it), and
        the energies are summed over ranks, so the check and its verdict do not depend on the rank count.
        Energies are float32, so the step is relatively large (1e-3 relative) and agreement is about 1 %.
        Returns the entries checked and the largest relative error, the same on every rank.
        """
        whole = self._whole_gradient(wrt, self.memory.get(grad).astype(np.float64))
        target = {"protein": self.protein_xyz, "poses": self.poses, "forcefield": self.ff_params}[wrt]
        rng = np.random.default_rng(7)
        biggest = np.argsort(np.abs(whole).ravel(), kind="stable")[::-1][: max(1, count // 2)]
        chosen = list(biggest) + list(rng.integers(0, whole.size, count - len(biggest)))
        largest = float(np.abs(whole).max())
        worst = 0.0
        for flat in chosen:
            idx = np.unravel_index(int(flat), whole.shape)
            here = self._local_index(wrt, idx)
            held = float(target[here]) if here is not None else 0.0
            original = self._allsum(held) if wrt == "poses" else held  # a pose: from the rank that holds it
            h = 1e-3 * max(1.0, abs(original))
            sums, points = [], []
            for value in (original + h, original - h):
                used = target.dtype.type(value)  # the float32 value actually used
                points.append(float(used))
                if here is not None:
                    target[here] = used
                if wrt == "forcefield":
                    self.update_coefficients()
                sums.append(self._allsum(float(self.memory.get(self.score()).astype(np.float64).sum())))
            if here is not None:
                target[here] = target.dtype.type(original)
            if wrt == "forcefield":
                self.update_coefficients()
            fd = (sums[0] - sums[1]) / (points[0] - points[1])
            scale = max(abs(fd), largest * 1e-3, 1e-6)
            worst = max(worst, abs(fd - float(whole[idx])) / scale)
        self.score()
        return {"components": len(chosen), "max_rel_error": worst}

    def _whole_gradient(self, wrt: str, local: np.ndarray) -> np.ndarray:
        """Every rank's gradient together, on every rank: the poses' side by side, the shared data's summed."""
        if self.comm is None:
            return local
        if wrt == "poses":
            return np.concatenate(self.comm.allgather(local), axis=1)
        total = np.empty_like(local)
        self.comm.Allreduce(local, total)
        return total

    def _local_index(self, wrt: str, idx: tuple[Any, ...]) -> tuple[int, ...] | None:
        """Where entry ``idx`` of the whole input lives on this rank (None: only on another rank)."""
        if wrt != "poses":
            return tuple(int(i) for i in idx)
        component, pose = (int(i) for i in idx)
        return (component, pose - self.lo) if self.lo <= pose < self.hi else None

    def _allsum(self, value: float) -> float:
        return float(self.comm.allreduce(value)) if self.comm is not None else value


def _coefficients(ff_hbtype: Any, ff_params: Any, protein_type: Any, coef: Any) -> None:
    pad.launch(pair_coefficients, coef.shape[0] * coef.shape[2], ff_hbtype, ff_params, protein_type, coef)


def verify(energies: np.ndarray, reference: np.ndarray) -> tuple[bool, float]:
    """The reference's rule, with |ref|: max over poses of |ref - e| / |ref| below 0.025 %.

    Poses where both |ref| and |e| are below 1 are skipped. Returns (valid, max relative difference).
    """
    e = energies.astype(np.float64)
    keep = (np.abs(reference) >= 1.0) | (np.abs(e) >= 1.0)
    if not keep.any():
        return True, 0.0
    diff = np.abs(reference[keep] - e[keep]) / np.maximum(np.abs(reference[keep]), np.finfo(np.float64).tiny)
    worst = float(diff.max())
    return bool(worst < TOLERANCE and math.isfinite(worst)), worst
