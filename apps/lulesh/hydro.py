"""The LULESH time step on pad: launches of the kernels, halo exchanges and the time-step reduction.

``Hydro`` owns one rank's mesh, its scratch arrays and its halos; the state that a cycle carries from one
to the next is a ``State``, passed explicitly so that ``pad.autodiff`` can seed and differentiate it. Every
loop is a ``pad.launch`` and every message a ``pad.mpi`` call, so the whole cycle, set-up included, can
run inside ``autodiff``; nothing between launches touches a state array with NumPy.

One cycle (the original's ``TimeIncrement`` then ``LagrangeLeapFrog``), in launches:

1. ``k_dt_candidate`` -> ``Allreduce`` MIN over ranks -> ``k_time_increment`` (one rank: the last alone)
2. ``k_element_forces`` (stress and hourglass forces per corner) -> ``k_gather_forces`` (per node) ->
   halo sum of the forces -> ``k_advance_nodes`` -> halo copy of positions and velocities
3. ``k_kinematics`` (with the monotonic Q's gradients) -> ghost exchange of the velocity gradients -> ``k_monoq``
   -> ``k_eos`` (with the volumes' update)
4. ``k_time_constraints`` (per chunk of elements) -> ``k_min_chunks`` (GPUs: a tree) -> ``k_time_reduce``
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

import pad
import pad.mpi
from apps.cli import Memory
from apps.lulesh import kernels as K
from apps.lulesh.mesh import Mesh

STOPTIME = 1.0e-2
DTMAX = 1.0e-2
DT_MULT_LB = 1.1
DT_MULT_UB = 1.2

PARAMETERS = ("einit", "hgcoef", "qqc", "qlc_monoq", "qqc_monoq", "ss4o3", "monoq_limiter_mult")
"""The model's parameters, in the order of the ``params`` array (``kernels.EINIT`` ...)."""

VOLUME_ERROR, QSTOP_ERROR = -1, -2
"""The original's exit codes (``exit(VolumeError)``, ``exit(QStopError)``)."""


def default_parameters(nx: int, tp: int) -> dict[str, float]:
    """The original's values; ``einit`` scaled to the mesh (3.948746e7 for 45 elements a side)."""
    scale = (nx * tp) / 45.0
    return {
        "einit": 3.948746e7 * scale * scale * scale,
        "hgcoef": 3.0,
        "qqc": 2.0,
        "qlc_monoq": 0.5,
        "qqc_monoq": 2.0 / 3.0,
        "ss4o3": 4.0 / 3.0,
        "monoq_limiter_mult": 2.0,
    }


DEVICE_BYTES = {
    "primal": (478, 86, 23, 174),
    "grad": (944, 256, 63, 466),
    "sensitivity": (924, 365, 63, 488),
    "snapshot": (370, 71, 0, 114),
}
"""Device bytes of one rank's run per element, per node, per slot of the ``delv`` arrays' blocks for the
three upper faces (ghost or zero blocks, ``nx * nx`` slots each) and once, by mode, and of each state
snapshot that a whole-run gradient holds: the most device arrays alive at once in one-rank runs on numba's
simulator at -s 3, 4, 5 and 6 (two cycles, three for the snapshots, Python's garbage collector off, so that a
cycle's garbage counts until the next one), fitted by the other three terms to within 10 bytes (the
gradient's within 0.05%, 165 bytes at -s 6) before the zero blocks came, whose slots' bytes were then fitted
alone (the gradient's by its runs, its whole-run sensitivity's taken equal)."""

HALO_BYTES = 384
"""Device bytes per node of a block's six faces: the halo exchanges' message buffers, in a gradient with
their shadows and copies (an allowance; a one-rank run has none)."""


def device_bytes(nx: int, mode: str, snapshots: int = 0) -> int:
    """The device memory one rank's run of ``-s nx`` in ``mode`` allocates (estimated before it does), with
    ``snapshots`` state copies held in ``sensitivity`` mode."""
    elements, nodes = nx**3, (nx + 1) ** 3

    def bytes_of(what: str) -> int:
        per_element, per_node, per_face_slot, once = DEVICE_BYTES[what]
        return per_element * elements + per_node * nodes + per_face_slot * 3 * nx**2 + once

    held = snapshots * bytes_of("snapshot") if mode == "sensitivity" else 0
    return bytes_of(mode) + held + HALO_BYTES * 6 * (nx + 1) ** 2


class Abort(Exception):
    """A physics abort of the original (negative volume, q above qstop), agreed on every rank."""

    def __init__(self, code: int, cycle: int, element: int, rank: int, what: str) -> None:
        self.code, self.cycle, self.element, self.rank = code, cycle, element, rank
        name = "VolumeError" if code == VOLUME_ERROR else "QStopError"
        super().__init__(f"{name}: {what} in element {element} of rank {rank} at cycle {cycle}")


FAULTS = {
    K.DETERM: (VOLUME_ERROR, "non-positive Jacobian determinant"),
    K.VOLUME: (VOLUME_ERROR, "non-positive relative volume"),
    K.VNEW: (VOLUME_ERROR, "non-positive new relative volume"),
    K.QSTOP_BIT: (QSTOP_ERROR, "artificial viscosity q above qstop"),
    K.EOS_VOLUME: (VOLUME_ERROR, "non-positive volume in the EOS"),
}


@dataclass
class State:
    """What one cycle reads and writes and the next reads again (one rank's part)."""

    xv: Any  # (6, nnode) x, y, z, xd, yd, zd
    nodal_mass: Any
    e: Any
    p: Any
    q: Any
    v: Any
    ss: Any
    volo: Any
    elem_mass: Any
    clock: Any  # kernels.TIME, DT, DTCOURANT, DTHYDRO
    params: Any  # kernels.EINIT, ... in PARAMETERS order

    def arrays(self) -> list[Any]:
        return [getattr(self, f.name) for f in dataclasses.fields(self)]


def reduction_rows(nelem: int, device: str) -> list[int]:
    """Rows of the time step's partial minima, level by level. A CPU thread loops over whole chunks of the
    elements (256 of them, one level); a GPU reduces in a tree that gives each thread a few elements, then 32
    rows at a time, as one thread's loop over many rows would leave the GPU idle."""
    if device == "cpu":
        return [max(1, min(nelem, 256))]
    rows = [max(1, -(-nelem // 4))]
    while rows[-1] > 32:
        rows.append(-(-rows[-1] // 32))
    return rows


class Hydro:
    """One rank's share of a LULESH run: mesh, scratch arrays, halos, and the kernels' launches."""

    def __init__(self, mesh: Mesh, comm: pad.mpi.Comm, memory: Memory | None = None) -> None:
        self.mesh, self.comm = mesh, comm
        self.memory = memory = memory or Memory("cpu")
        self.rank = comm.rank
        nelem, nnode = mesh.nelem, mesh.nnode
        put = memory.put

        def fixed(a: np.ndarray) -> Any:
            """An index array that never changes, frozen: the scatter adjoints' plans then never compare it."""
            return put(pad.arrays.frozen(a))

        self.nodelist = fixed(mesh.nodelist)
        self.corner_start = fixed(mesh.corner_start)
        # Corner forces are indexed [axis, corner, element] in the kernels. A GPU stores them corner-major
        # (neighbouring threads read neighbouring words), CPUs each element's corners together, as the C++
        # original does (a thread streams three cache lines an element, not 24 lines of 24 arrays):
        # ``corner_list`` numbers the corners in the layout stored, ``corner_stride`` apart from one element
        # to the next.
        self.corner_stride = 1 if memory.device == "gpu" else 8
        corners = (
            mesh.corner_list
            if self.corner_stride == 1
            else (mesh.corner_list % nelem) * 8 + mesh.corner_list // nelem
        )
        self.corner_list = fixed(corners.astype(mesh.corner_list.dtype))
        self.neighbours = fixed(mesh.neighbours)
        self.symmetry = fixed(mesh.symmetry)
        self.rep = fixed(mesh.rep)
        # scratch: rewritten every cycle before it is read
        # Stress and hourglass forces per corner (see mesh). A GPU sums the two per corner, as LLNL's CUDA
        # port does (half the bytes); CPUs keep them apart and sum each in the C++ original's order.
        self.combined = memory.device == "gpu"
        # A costly region's earlier EOS evaluations: CPUs store them as the C++ original does, GPUs keep them
        # in registers as the port does (``k_eos``).
        self.rep_stores = memory.device == "cpu"
        self.fs, self.fs_corners = self._corner_forces(nelem)
        self.fh, self.fh_corners = self._corner_forces(0 if self.combined else nelem)
        self.determ = put(np.zeros(nelem))
        self.force = put(np.zeros((3, nnode)))
        self.vnew = put(np.zeros(nelem))
        self.delv = put(np.zeros(nelem))
        self.vdov = put(np.zeros(nelem))
        self.arealg = put(np.zeros(nelem))
        self.qq = put(np.zeros(nelem))
        self.ql = put(np.zeros(nelem))
        self.delx = put(np.zeros((3, nelem)))
        self.delv_grad = put(np.zeros((3, mesh.ndelv)))  # ghost and zero blocks after the elements
        self.e_new = put(np.zeros(nelem))
        self.p_new = put(np.zeros(nelem))
        self.q_new = put(np.zeros(nelem))
        self.partials = [put(np.zeros((rows, 2))) for rows in reduction_rows(nelem, memory.device)]
        self.gnewdt = put(np.zeros(1))
        self.newdt = put(np.zeros(1))
        self.fault = put(np.zeros(1, np.int64))  # faults so far
        self.earlier = put(np.zeros(1, np.int64))  # faults before this cycle (kernels.count_fault)
        self.flag = put(np.zeros(nelem, np.int32))
        self.side = (mesh.nx + 1,) * 3
        self.node_halo = pad.mpi.Halo.structured(comm, (mesh.tp,) * 3, self.side)
        links = [(r, put(send), recv, st, rt) for r, send, recv, st, rt in mesh.face_links]
        self.ghost_halo = pad.mpi.Halo(comm, links)
        # The cycles after the first, each a time increment and a leap-frog step, recorded once and
        # replayed (on a GPU as CUDA graphs), their Allreduce and halo exchanges too on several ranks: a
        # cycle's Python would take longer than a small mesh's kernels.
        self.later_increment = pad.graph(lambda s: self.time_increment(s, first=False))
        self.replayed_leapfrog = pad.graph(self.leapfrog)

    # ----------------------------------------------------------------------------------- state
    def initial_state(
        self, parameters: dict[str, float] | None = None, coords: Any = None, into: State | None = None
    ) -> State:
        """The state before set-up: the mesh's coordinates (or ``coords``), everything else at rest; written
        into the arrays of ``into`` where given (the ``pad.graph`` records of a run on them then replay)."""
        if into is not None:
            for old, new in zip(into.arrays(), self.initial_state(parameters, coords).arrays(), strict=True):
                pad.copy(old, new)
            return into
        m, put = self.mesh, self.memory.put
        values = default_parameters(m.nx, m.tp) | (parameters or {})
        xv = np.zeros((6, m.nnode))
        xv[:3] = m.coords if coords is None else coords
        clock = np.zeros(4)
        clock[K.DTCOURANT] = clock[K.DTHYDRO] = 1.0e20
        return State(
            xv=put(xv),
            nodal_mass=put(np.zeros(m.nnode)),
            e=put(np.zeros(m.nelem)),
            p=put(np.zeros(m.nelem)),
            q=put(np.zeros(m.nelem)),
            v=put(np.ones(m.nelem)),
            ss=put(np.zeros(m.nelem)),
            volo=put(np.zeros(m.nelem)),
            elem_mass=put(np.zeros(m.nelem)),
            clock=put(clock),
            params=put(np.array([values[name] for name in PARAMETERS])),
        )

    def _corner_forces(self, nelem: int) -> tuple[Any, Any]:
        """A zero ``(3, 8, nelem)`` array of corner forces in this device's layout, and its ``(3, 8 * nelem)``
        view by corner number (``corner_list``)."""
        if self.corner_stride == 1:
            forces = self.memory.put(np.zeros((3, 8, nelem)))
            return forces, forces.reshape(3, -1)
        by_element = self.memory.put(np.zeros((3, nelem, 8)))
        return by_element.transpose(0, 2, 1), by_element.reshape(3, -1)

    def setup(self, s: State) -> None:
        """Reference volumes and masses from the coordinates, nodal masses summed over ranks, the deposited
        energy and the first time step (the original's Domain constructor and its nodal-mass exchange)."""
        m = self.mesh
        pad.launch(K.k_initial_volume, m.nelem, self.nodelist, s.xv, s.volo, s.elem_mass)
        pad.launch(
            K.k_nodal_mass,
            m.nnode,
            self.corner_start,
            self.corner_list,
            self.corner_stride,
            s.volo,
            s.nodal_mass,
        )
        self.node_halo.exchange(s.nodal_mass.reshape(self.side), "sum")
        pad.launch(K.k_deposit_energy, 1, m.at_origin, s.params, s.volo, s.e, s.clock)

    # ----------------------------------------------------------------------------------- one cycle
    def time_increment(self, s: State, first: bool) -> None:
        """The next time step, reduced over ranks (TimeIncrement). One rank's time increment makes its own
        proposal: a launch and a device copy fewer in each cycle's graph."""
        alone = self.comm.size == 1
        if not (first or alone):
            pad.launch(K.k_dt_candidate, 1, s.clock, self.gnewdt)
            self.comm.Allreduce(self.gnewdt, self.newdt, pad.mpi.MIN)
        pad.launch(
            K.k_time_increment, 1, first, alone, self.newdt, s.clock, STOPTIME, DTMAX, DT_MULT_LB, DT_MULT_UB,
            self.fault, self.earlier,
        )  # fmt: skip

    def leapfrog(self, s: State) -> None:
        """Advance nodes then elements by one time step, and find the next step's constraints."""
        self.lagrange_nodal(s)
        self.lagrange_elements(s)
        self.time_constraints(s)

    def lagrange_nodal(self, s: State) -> None:
        m = self.mesh
        pad.launch(
            K.k_element_forces, m.nelem, self.nodelist, s.xv, s.p, s.q, s.volo, s.v, s.ss,
            s.elem_mass, s.params, self.combined, self.fs, self.fh, self.determ, self.fault, self.earlier,
            self.flag,
        )  # fmt: skip
        pad.launch(
            K.k_gather_forces, m.nnode, self.corner_start, self.corner_list, self.fs_corners,
            self.fh_corners, self.combined, self.force,
        )  # fmt: skip
        self.node_halo.exchange(self.force.reshape(3, *self.side), "sum")
        pad.launch(K.k_advance_nodes, m.nnode, s.clock, self.force, s.nodal_mass, self.symmetry, s.xv)
        self.node_halo.exchange(s.xv.reshape(6, *self.side), "copy")

    def lagrange_elements(self, s: State) -> None:
        m = self.mesh
        pad.launch(
            K.k_kinematics, m.nelem, self.nodelist, s.xv, s.volo, s.v, s.clock, self.vnew, self.delv,
            self.arealg, self.vdov, self.delx, self.delv_grad, self.fault, self.earlier, self.flag,
        )  # fmt: skip
        self.ghost_halo.exchange(self.delv_grad, "copy")
        pad.launch(
            K.k_monoq, m.nelem, self.neighbours, self.delv_grad, self.delx, self.vdov, s.elem_mass, s.volo,
            self.vnew, s.params, s.q, self.qq, self.ql, self.fault, self.earlier, self.flag,
        )  # fmt: skip
        pad.launch(
            K.k_eos, m.nelem, self.rep, self.rep_stores, s.v, self.vnew, self.delv, self.qq, self.ql, s.e, s.p,
            s.q, s.ss, self.e_new, self.p_new, self.q_new, self.fault, self.earlier, self.flag,
        )  # fmt: skip

    def time_constraints(self, s: State) -> None:
        first, last = self.partials[0], self.partials[-1]
        pad.launch(
            K.k_time_constraints, len(first), len(first), self.mesh.nelem, s.ss, self.vdov, self.arealg,
            s.params, first,
        )  # fmt: skip
        for partial, fewer in zip(self.partials[:-1], self.partials[1:], strict=True):
            pad.launch(K.k_min_chunks, len(fewer), len(fewer), len(partial), partial, fewer)
        pad.launch(K.k_time_reduce, 1, len(last), last, s.clock)

    def cycle(self, t: int, s: State, leapfrog: Any = None) -> None:
        """Cycle ``t + 1``: the time increment, the leap-frog step (or ``leapfrog(s)``, a differentiated
        one, say) and the fault check."""
        self.time_increment(s, t == 0)
        (leapfrog or self.leapfrog)(s)
        self.check(t + 1)

    def advance(self, s: State, cycles: int, on_cycle: Any = None, leapfrog: Any = None) -> int:
        """Run cycles until the stop time or ``cycles`` cycles (the original's main loop); returns the count.

        ``on_cycle(cycle, time, dt)`` is called after each cycle; ``leapfrog(s)`` replaces the leap-frog
        step (a differentiated one, say). A fault stops the run with ``Abort`` on every rank.

        The host never waits for a cycle to end. After issuing cycle k it waits only for k's time increment
        (its first kernels), whose time tells whether cycle k + 1 runs, and issues k + 1 while the device
        still works on k's leap-frog step. The faults of cycle k - 1 arrive with k's time (``count_fault``
        keeps its flags), so an abort names the same cycle and element as a check after every cycle would.
        """
        time = float(self.memory.get(s.clock)[K.TIME])
        if cycles <= 0 or not time < STOPTIME:
            return 0
        fetch = self.memory.fetch(s.clock[: K.DT + 1], self.earlier)
        step = leapfrog or self.leapfrog
        self.time_increment(s, first=True)
        fetch.start(1)
        step(s)
        cycle, last = 1, None
        while True:
            (time, dt), (faults,) = fetch.wait(cycle)
            if faults or self.comm.size > 1:
                self.check(cycle - 1, int(faults))
            if on_cycle is not None and last is not None:
                on_cycle(cycle - 1, *last)
            last = (time, dt)
            if not (time < STOPTIME and cycle < cycles):
                break
            self.later_increment(s)
            fetch.start(cycle + 1)
            (step if leapfrog else self.replayed_leapfrog)(s)
            cycle += 1
        self.check(cycle)
        if on_cycle is not None:
            on_cycle(cycle, *last)
        return cycle

    # ----------------------------------------------------------------------------------- faults
    def check(self, cycle: int, local: int | None = None) -> None:
        """Raise ``Abort`` on every rank if a fault was counted on any rank in this cycle (``local``: this
        rank's count of it, if not the count so far, ``fault[0]``)."""
        local = int(self.fault[0]) if local is None else local
        counted = self.comm.mpi.allreduce(local, op=pad.mpi.MAX) if self.comm.size > 1 else local
        if not counted:
            return
        report = None
        if local:
            flags = self.memory.get(self.flag)
            bit = min(b for b in FAULTS if np.any(flags & b))
            element = int(np.flatnonzero(flags & bit)[0])
            report = (bit, element, self.rank)
        reports = self.comm.mpi.allgather(report) if self.comm.size > 1 else [report]
        bit, element, rank = min(r for r in reports if r is not None)
        code, what = FAULTS[bit]
        raise Abort(code, cycle, element, rank, what)
