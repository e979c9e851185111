"""Benchmark pad.mpi: per op and message size, forward and reverse time, their ratio, bytes moved.

Run under MPI, e.g. ``mpiexec -n 4 python scripts/bench_mpi.py --json results/bench_mpi_4.json``.
For every op at 8 B, 64 KiB and 8 MiB per rank (float64), it reports:
- ``forward_s``: the op outside autodiff (a plain mpi4py call), ``forward_ad_s``: the op inside
  ``pad.autodiff``'s forward sweep (with its consistency check and recording);
- ``reverse_s``: its adjoint in the reverse pass; ``ratio``: ``reverse_s / forward_s``; ``ratio_best``:
  the same for the fastest repetition of each (less sensitive to other load on the machine);
- ``bytes_forward`` and ``bytes_reverse``: payload received from other ranks per call, summed over ranks,
  as pad counts it (``pad.mpi.stats``); MIN/MAX add the winners' ranks (int32) and PROD the result.
Times are medians over repetitions of the slowest rank's time, each repetition started by a Barrier;
plain and differentiated repetitions alternate.
Finally ``overhead_us``: what a pad call outside autodiff costs on top of the same mpi4py call.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

import pad
import pad.mpi

COMM = pad.mpi.COMM_WORLD
P, ME = COMM.size, COMM.rank
RIGHT, LEFT = (ME + 1) % P, (ME - 1) % P


def send_recv(c: Any, s: np.ndarray, r: np.ndarray) -> None:
    if ME % 2 == 0:
        c.Send(s, ME + 1, 0)
    else:
        c.Recv(r, ME - 1, 0)


def isend_irecv(c: Any, s: np.ndarray, r: np.ndarray) -> None:
    pad.mpi.Request.Waitall([c.Irecv(r, LEFT, 0), c.Isend(s, RIGHT, 0)])


# op name -> (function of (comm, sendbuf, recvbuf), sendbuf blocks, recvbuf blocks)
OPS: dict[str, tuple[Callable[[Any, np.ndarray, np.ndarray], Any], int, int]] = {
    "Send/Recv": (send_recv, 1, 1),
    "Sendrecv": (lambda c, s, r: c.Sendrecv(s, RIGHT, 0, r, LEFT, 0), 1, 1),
    "Isend/Irecv": (isend_irecv, 1, 1),
    "Bcast": (lambda c, s, r: c.Bcast(r, 0), 1, 1),
    "Reduce SUM": (lambda c, s, r: c.Reduce(s, r, pad.mpi.SUM, 0), 1, 1),
    "Allreduce SUM": (lambda c, s, r: c.Allreduce(s, r, pad.mpi.SUM), 1, 1),
    "Allreduce MAX": (lambda c, s, r: c.Allreduce(s, r, pad.mpi.MAX), 1, 1),
    "Allreduce PROD": (lambda c, s, r: c.Allreduce(s, r, pad.mpi.PROD), 1, 1),
    "Gather": (lambda c, s, r: c.Gather(s, r, 0), 1, P),
    "Scatter": (lambda c, s, r: c.Scatter(s, r, 0), P, 1),
    "Allgather": (lambda c, s, r: c.Allgather(s, r), 1, P),
    "Alltoall": (lambda c, s, r: c.Alltoall(s, r), P, P),
    "Reduce_scatter_block": (lambda c, s, r: c.Reduce_scatter_block(s, r), P, 1),
    "Scan": (lambda c, s, r: c.Scan(s, r), 1, 1),
    "Exscan": (lambda c, s, r: c.Exscan(s, r), 1, 1),
    "Barrier": (lambda c, s, r: c.Barrier(), 1, 1),
}


class Mark:
    """A tape record that notes the time its reverse runs (after a Barrier when ``sync``)."""

    def __init__(self, times: dict[str, float], key: str, sync: bool) -> None:
        self.times, self.key, self.sync = times, key, sync

    def reverse(self) -> None:
        if self.sync:
            COMM.mpi.Barrier()
        self.times[self.key] = time.perf_counter()


def slowest(t: float) -> float:
    return float(COMM.mpi.allreduce(t, op=MPI.MAX))


def measure(name: str, nbytes: int, reps: int) -> dict[str, Any]:
    fn, sblocks, rblocks = OPS[name]
    n = max(1, nbytes // 8)
    rng = np.random.default_rng(ME)
    s, r = rng.uniform(0.5, 1.5, sblocks * n), rng.uniform(0.5, 1.5, rblocks * n)
    ds, dr = np.zeros_like(s), np.ones_like(r)
    plain, fwd, rev = [], [], []
    pad.mpi.reset_stats()
    for _ in range(reps):  # plain and differentiated runs alternate, so load on the machine hits both
        COMM.mpi.Barrier()
        t0 = time.perf_counter()
        fn(COMM, s, r)
        plain.append(slowest(time.perf_counter() - t0))
        times: dict[str, float] = {}

        def f(s: np.ndarray, r: np.ndarray, times: dict[str, float] = times) -> None:
            ctx = pad.tape.current()
            assert ctx is not None
            ctx.record(Mark(times, "end", sync=False))
            COMM.mpi.Barrier()
            t0 = time.perf_counter()
            fn(COMM, s, r)
            times["forward"] = time.perf_counter() - t0
            ctx.record(Mark(times, "start", sync=True))

        pad.autodiff(f, pad.Dup(s, ds), pad.Dup(r, dr))
        fwd.append(slowest(times["forward"]))
        rev.append(slowest(times["end"] - times["start"]))
    st = pad.mpi.stats()
    per_call = {k: int(COMM.mpi.allreduce(st[k]["bytes"])) // reps for k in ("forward", "reverse")}
    out: dict[str, Any] = {
        "op": name,
        "bytes_per_rank": n * 8,
        "forward_s": float(np.median(plain)),
        "forward_ad_s": float(np.median(fwd)),
        "reverse_s": float(np.median(rev)),
        "bytes_forward": per_call["forward"],
        "bytes_reverse": per_call["reverse"],
    }
    out["ratio"] = float(np.median(rev)) / float(np.median(plain))
    out["ratio_best"] = min(rev) / min(plain)  # fastest repetitions: less sensitive to a loaded machine
    return out


def overhead(reps: int = 20000) -> dict[str, float]:
    """Microseconds a pad call outside autodiff adds to the mpi4py call (Allreduce of 8 B)."""
    result = {}
    for label, comm in (("COMM_SELF", pad.mpi.Comm(MPI.COMM_SELF)), ("COMM_WORLD", COMM)):
        a, b = np.ones(1), np.zeros(1)
        raw, wrapped = [], []
        for _ in range(5):
            comm.mpi.Barrier()
            t0 = time.perf_counter()
            for _ in range(reps):
                comm.mpi.Allreduce(a, b)
            raw.append((time.perf_counter() - t0) / reps)
            comm.mpi.Barrier()
            t0 = time.perf_counter()
            for _ in range(reps):
                comm.Allreduce(a, b)
            wrapped.append((time.perf_counter() - t0) / reps)
        result[f"mpi4py_{label}_us"] = 1e6 * float(np.median(raw))
        result[f"pad_{label}_us"] = 1e6 * float(np.median(wrapped))
        result[f"overhead_{label}_us"] = result[f"pad_{label}_us"] - result[f"mpi4py_{label}_us"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results to this file (rank 0)")
    parser.add_argument("--sizes", default="8,65536,8388608", help="bytes per rank, comma-separated")
    parser.add_argument("--ops", default=",".join(OPS), help="ops to run, comma-separated")
    args = parser.parse_args()
    rows = []
    for nbytes in (int(v) for v in args.sizes.split(",")):
        reps = 30 if nbytes <= 8192 else 15 if nbytes <= 1 << 20 else 7
        for name in args.ops.split(","):
            if name == "Send/Recv" and P % 2:
                continue
            if name == "Barrier" and nbytes != 8:
                continue
            row = measure(name, nbytes, reps)
            rows.append(row)
            if ME == 0:
                print(
                    f"{name:22s} {row['bytes_per_rank']:>9d} B  fwd {row['forward_s'] * 1e6:10.1f} us  "
                    f"fwd(AD) {row['forward_ad_s'] * 1e6:10.1f} us  rev {row['reverse_s'] * 1e6:10.1f} us  "
                    f"ratio {row['ratio']:5.2f} (best {row['ratio_best']:5.2f})  "
                    f"bytes fwd {row['bytes_forward']:>10d} rev {row['bytes_reverse']:>10d}",
                    flush=True,
                )
    extra = overhead()
    if ME == 0:
        print(json.dumps(extra, indent=1))
        result = {
            "ranks": P,
            "cpus": os.cpu_count(),
            "mpi": MPI.Get_library_version().splitlines()[0],
            "ops": rows,
            "overhead": extra,
        }
        if args.json:
            os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
            with open(args.json, "w") as fh:
                json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
