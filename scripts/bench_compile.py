"""A first run and a second one: an app started with an empty kernel cache, then again with the cache it
filled, timed from the outside (wall and CPU seconds, children included) and by the app (``compile_s``, and
its timed run: the same within noise both times, as compilation is kept out of it).

The cache is pad's generated sources and numba's compiled code beside them: ``PAD_CACHE_DIR``, here a fresh
temporary folder (pad's own few numba functions keep their cache in the package).

    python scripts/bench_compile.py                                       # LULESH -s 5 -i 5 --mode grad, CPU
    python scripts/bench_compile.py --device gpu                          # the same gradient on a GPU
    python scripts/bench_compile.py --checkout ../main                    # another checkout's apps (a baseline)
    python scripts/bench_compile.py --app minibude -- --mode grad --poses 4096

Writes ``results/compile-APP-DEVICE.json`` (``--json``): per run (cold, warm) the command, wall seconds, CPU
seconds, the app's ``compile_s`` and record; the checkout's commit, the machine and its load average before
and after.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

from apps import cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_ARGS = {"lulesh": ["-s", "5", "-i", "5", "--mode", "grad"], "minibude": ["--mode", "grad"]}


def run(cmd: list[str], cwd: str, env: dict[str, str]) -> dict[str, Any]:
    """Run ``cmd`` once: wall and CPU seconds (its processes and theirs), exit status, the app's record."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "command": cmd,
        "status": proc.returncode,
        "wall_s": wall,
        "cpu_s": cpu,
        "output": proc.stdout[-4000:],
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else None
    own = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=cli.HelpFormatter)
    p.add_argument("--app", choices=sorted(DEFAULT_ARGS), default="lulesh")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--threads", type=cli.integer(1), default=1, help="CPU threads of the app (cpu)")
    p.add_argument("--ranks", type=cli.integer(1), default=1, help="MPI ranks (the mpiexec beside Python)")
    p.add_argument("--checkout", default=REPO, help="the checkout whose apps run")
    p.add_argument("--json", metavar="PATH", help="the results (default: results/compile-APP-DEVICE.json)")
    args = p.parse_args(own)
    app_args = DEFAULT_ARGS[args.app] if extra is None else extra
    out = args.json or os.path.join(REPO, "results", f"compile-{args.app}-{args.device}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    checkout = os.path.abspath(args.checkout)
    load_before = os.getloadavg()
    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="pad-cache-") as cache:
        path = os.pathsep.join([checkout, *filter(None, [os.environ.get("PYTHONPATH")])])
        env = {**os.environ, "PAD_CACHE_DIR": cache, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
        if args.device == "cpu":
            env["NUMBA_NUM_THREADS"] = str(args.threads)
        for name in ("cold", "warm"):
            json_path = os.path.join(cache, f"{name}.json")
            cmd = [sys.executable, "-m", f"apps.{args.app}", *app_args, "--device", args.device]
            cmd += ["--json", json_path] + (["--threads", str(args.threads)] if args.device == "cpu" else [])
            if args.ranks > 1:
                cmd = [os.path.join(os.path.dirname(sys.executable), "mpiexec"), "-n", str(args.ranks), *cmd]
            runs[name] = run(cmd, checkout, env) | {"result": _record(json_path)}
            print(_summary(name, runs[name]), flush=True)
    record = {
        "app": args.app,
        "device": args.device,
        "arguments": app_args,
        "threads": args.threads,
        "ranks": args.ranks,
        "checkout": checkout,
        "checkout_commit": (
            cli.command_output(["git", "-C", checkout, "rev-parse", "--short", "HEAD"]) or ""
        ).strip(),
        "runs": runs,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "machine": cli.machine(),
    }
    cli.write_json(out, record)
    print(f"bench_compile: results in {out}")
    return 0 if all(r["status"] == 0 for r in runs.values()) else 1


def _record(path: str) -> dict[str, Any] | None:
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        record: dict[str, Any] = json.load(fh)
    return record


def _summary(name: str, r: dict[str, Any]) -> str:
    text = f"{name}: exit status {r['status']}, {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU"
    result = r["result"]
    if result is None:
        return text + "; no record:\n" + r["output"]
    if result.get("compile_s") is not None:
        text += f"; compile_s {result['compile_s']:.1f}"
    ahead = result.get("precompile")
    if ahead:
        text += (
            f" (precompile: {ahead['compiled']} of {ahead['launchers']} launchers in {ahead['seconds']:.1f} s, "
            f"CPU {ahead['cpu_s']:.1f} s here and {ahead['workers_cpu_s']:.1f} s in {ahead['workers']} workers)"
        )
    text += f"; primal {result['time_primal_s'] * 1e3:.3f} ms"
    if result.get("time_grad_s") is not None:
        text += f", gradient {result['time_grad_s'] * 1e3:.3f} ms"
    if "elapsed_s" in result:
        text += f", Elapsed {result['elapsed_s']:.3g} s, FOM {result['fom']:.4g}"
    return text


if __name__ == "__main__":
    sys.exit(main())
