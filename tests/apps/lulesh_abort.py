"""Run under mpiexec -n 8 by test_lulesh.py: rank 3's state is corrupted; every rank must stop with the
same report (printed as ``rank R: <message> (code C)``) and a non-zero status."""

import sys

import pad.mpi
from apps.lulesh import hydro as H
from apps.lulesh import mesh as M

comm = pad.mpi.COMM_WORLD
h = H.Hydro(M.build(3, comm.size, comm.rank, 11, 1, 1), comm)
s = h.initial_state()
h.setup(s)
if comm.rank == 3:
    s.v[9] = -1.0
try:
    h.advance(s, 5)
except H.Abort as exc:
    print(f"rank {comm.rank}: {exc} (code {exc.code})", flush=True)
    sys.exit(exc.code & 0xFF)
print(f"rank {comm.rank}: no abort", flush=True)
