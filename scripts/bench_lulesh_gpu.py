"""LULESH on a GPU: pad against LLNL's CUDA port, side by side in one run; writes JSON.

``--cuda-src DIR`` is a checkout of the LULESH repository's ``2.0.2-dev`` branch (its ``cuda/src``; BSD-style
licence, see docs/gpus.md) that the user fetched; it is never committed. The port is built in a scratch copy
(``--build-dir``, reused while its sources are unchanged) with its release flags, after the one fix current
compilers need: two ``__shfl_xor_sync`` calls on doubles in ``sm_utils.inl`` lack their mask argument.
For each case both programs run ``--rounds`` times, alternating, and the best FOM of each is kept.

    python scripts/bench_lulesh_gpu.py --cuda-src ~/LULESH --cases 30: 100:200 150:100 200:50
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from typing import Any

from bench_lulesh import case, parse_report, run_pad

from apps import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = ("lulesh.cu", "allocator.cu", "lulesh-comms.cu", "lulesh-comms-gpu.cu")
MASKLESS = re.compile(r"__shfl_xor_sync\(\s*(__double2(?:hi|lo)int\(r\))")


def build_cuda(src: str, folder: str, arch: str) -> str:
    """Build LLNL's CUDA LULESH from ``src`` (a checkout, or its ``cuda/src``) in ``folder``; the binary."""
    code = os.path.join(src, "cuda", "src") if os.path.isdir(os.path.join(src, "cuda", "src")) else src
    if not os.path.isfile(os.path.join(code, "lulesh.cu")):
        raise SystemExit(f"--cuda-src {src}: no lulesh.cu there or in cuda/src (the 2.0.2-dev branch)")
    digest = hashlib.sha256(arch.encode())
    for name in sorted(os.listdir(code)):
        if name.endswith((".cu", ".h", ".inl")):
            with open(os.path.join(code, name), "rb") as fh:
                digest.update(name.encode() + fh.read())
    binary, stamp = os.path.join(folder, "lulesh_cuda"), os.path.join(folder, "sources.sha256")
    if os.path.isfile(binary) and os.path.isfile(stamp):
        with open(stamp) as fh:
            if fh.read() == digest.hexdigest():
                return binary
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(code):
        if name.endswith((".cu", ".h", ".inl")):
            shutil.copy(os.path.join(code, name), folder)
    utils = os.path.join(folder, "sm_utils.inl")
    with open(utils) as fh:
        text = fh.read()
    with open(utils, "w") as fh:
        fh.write(MASKLESS.sub(r"__shfl_xor_sync(FULL_MASK, \1", text))
    command = ["nvcc", f"-arch={arch}", "-O3", "-DNDEBUG", "-I.", "-o", "lulesh_cuda", *SOURCES]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"building the CUDA port failed ({' '.join(command)}):\n{done.stderr[-3000:]}")
    with open(stamp, "w") as fh:
        fh.write(digest.hexdigest())
    return binary


def run_cuda(binary: str, size: int, iterations: int | None) -> dict[str, Any]:
    """One run of the CUDA port: its report's fields, the energy also as printed."""
    argv = [binary, "-s", str(size)] + (["-i", str(iterations)] if iterations else [])
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    report: dict[str, Any] = parse_report(done.stdout)
    report["energy_printed"] = re.search(r"Final Origin Energy\s+=\s+(\S+)", done.stdout).group(1)  # type: ignore[union-attr]
    return report


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cuda-src", required=True, metavar="DIR", help="a checkout of LULESH's 2.0.2-dev branch")
    p.add_argument("--build-dir", metavar="DIR", help="where the port is built (default: a scratch folder)")
    p.add_argument("--arch", default="sm_90", help="nvcc's -arch (sm_90: H100)")
    p.add_argument(
        "--cases",
        nargs="+",
        type=case,
        default=[(30, None), (100, 200), (150, 100), (200, 50)],
        help="SIZE:ITERATIONS (none: to the end)",
    )
    p.add_argument(
        "--rounds", type=int, default=2, help="runs of each program per case; the best FOM is kept"
    )
    p.add_argument("--json", default=os.path.join(ROOT, "results", "gpu-lulesh-vs-cuda.json"))
    args = p.parse_args()
    build = args.build_dir or tempfile.mkdtemp(prefix="lulesh-cuda-")
    binary = build_cuda(os.path.expanduser(args.cuda_src), build, args.arch)
    machine = cli.machine()
    records = []
    for size, iterations in args.cases:
        mine: dict[str, Any] = {}
        theirs: dict[str, Any] = {}
        for _ in range(args.rounds):
            run = run_pad(size, iterations, 1, "gpu")
            mine = run if not mine or run["fom"] > mine["fom"] else mine
            other = run_cuda(binary, size, iterations)
            theirs = other if not theirs or other["fom"] > theirs["fom"] else theirs
        record = {
            "size": size,
            "iterations": mine["iterations"],
            "iterations_cuda": int(theirs["iterations"]),
            "to_the_end": iterations is None,
            "fom_pad": mine["fom"],
            "fom_cuda": theirs["fom"],
            "fom_ratio": mine["fom"] / theirs["fom"],
            "energy_pad": f"{mine['final_origin_energy']:12.6e}".strip(),
            "energy_cuda": theirs["energy_printed"],
            "valid_pad": mine["valid"],
            "elapsed_pad_s": mine["elapsed_s"],
            "elapsed_cuda_s": theirs["elapsed_s"],
            "machine": machine["gpus"][0] if machine["gpus"] else None,
            "date": machine["date"],
            "commit": machine["pad_commit"],
        }
        records.append(record)
        print(json.dumps(record), flush=True)
    if not args.build_dir:
        shutil.rmtree(build, ignore_errors=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as fh:
        json.dump({"machine": machine, "records": records}, fh, indent=2)
        fh.write("\n")
    print(f"{'size':>5} {'iters':>6} {'FOM pad':>12} {'FOM CUDA':>12} {'pad/CUDA':>9}  energy pad / CUDA")
    for r in records:
        print(
            f"{r['size']:>5} {r['iterations']:>6} {r['fom_pad']:>12.6g} {r['fom_cuda']:>12.6g} "
            f"{r['fom_ratio']:>9.3f}  {r['energy_pad']} / {r['energy_cuda']}"
        )


if __name__ == "__main__":
    main()
