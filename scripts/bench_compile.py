"""A first run and a second one: an app started with an empty kernel cache, then again with the cache it
filled, timed from the outside (wall and CPU seconds, children included) and by the app (``compile_s``, and
its timed run: the same within noise both times, as compilation is kept out of it).

The cache is pad's generated sources and numba's compiled code: ``PAD_CACHE_DIR`` and ``NUMBA_CACHE_DIR``
(where numba then keeps the cache of every function, pad's own included), here a fresh temporary folder for
every cold run. With
``--baseline DIR`` another checkout's apps run too, alternating with this one's round by round, so that both
see the same machine (on a shared one, compare CPU seconds: wall seconds follow the load).

    python scripts/bench_compile.py                                       # LULESH -s 5 -i 5 --mode grad, CPU
    python scripts/bench_compile.py --device gpu                          # the same gradient on a GPU
    python scripts/bench_compile.py --baseline ../main --rounds 3         # against another checkout, 3 rounds
    python scripts/bench_compile.py --app minibude -- --mode grad --poses 4096
    python scripts/bench_compile.py --items --baseline ../main            # where a cold compile's time goes

``--items`` runs no app to the end: ``pad.precompile``'s items (the launchers, chunks and inspectors an app's
warm-up launches, each for the argument types it saw) are compiled one after the other in one process with an
empty cache, each timed alone: CPU seconds, and LLVM's share of its wall time (numba's event API).

Writes ``results/compile-APP-DEVICE.json`` (``--json``): per checkout its commit and per round the runs
(cold, warm): the command, wall seconds, CPU seconds, the app's ``compile_s`` and record (``--items``: per
item its kind, name, generated lines, CPU seconds and LLVM's share); the machine and its load average before
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
        "errors": proc.stderr[-4000:],
    }


# Run in a checkout's Python (argv: app, then its arguments): its pad.precompile's items, each compiled alone.
ITEMS = """
import importlib, json, os, sys, time
from numba.core import event
from pad.kernel import compiler

items = []


def keep(noted, workers=0, share=(0, 1)):
    items.extend(noted)
    raise SystemExit  # the app stops at its precompile


compiler.compile_ahead = keep
try:
    importlib.import_module(f"apps.{sys.argv[1]}.__main__").main(sys.argv[2:])
except SystemExit:
    pass
rows = []
for item in sorted(items, key=lambda item: -os.path.getsize(item.path)):
    llvm = []
    with event.install_timer("numba:llvm_lock", llvm.append):
        cpu, wall = time.process_time(), time.perf_counter()
        compiler._compile_items([item])
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    name = item.name
    kind = "inspector" if name.endswith("inspect") else "chunk" if name.endswith("_chunk") else "launcher"
    with open(item.path) as fh:
        lines = sum(1 for _ in fh)
    rows.append({"name": name, "kind": kind, "lines": lines, "cpu_s": cpu, "llvm_share": sum(llvm) / wall})
with open(os.environ["PAD_ITEMS_JSON"], "w") as fh:
    json.dump(rows, fh)
"""


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
    p.add_argument("--baseline", metavar="DIR", help="another checkout whose apps run too, alternating")
    p.add_argument("--rounds", type=cli.integer(1), default=1, help="cold and warm runs per checkout")
    p.add_argument("--items", action="store_true", help="compile precompile's items one by one, timed")
    p.add_argument("--json", metavar="PATH", help="the results (default: results/compile-APP-DEVICE.json)")
    args = p.parse_args(own)
    app_args = DEFAULT_ARGS[args.app] if extra is None else extra
    out = args.json or os.path.join(REPO, "results", f"compile-{args.app}-{args.device}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    checkouts = [os.path.abspath(c) for c in ([args.baseline] if args.baseline else []) + [args.checkout]]
    load_before = os.getloadavg()
    rounds: dict[str, list[dict[str, Any]]] = {c: [] for c in checkouts}
    for k in range(args.rounds):
        for checkout in checkouts:
            runs = (
                _items(checkout, args, app_args) if args.items else _cold_and_warm(checkout, args, app_args)
            )
            rounds[checkout].append(runs)
            for name, r in runs.items():
                print(f"{_name(checkout)} round {k + 1} {_summary(name, r)}", flush=True)
    record = {
        "app": args.app,
        "device": args.device,
        "arguments": app_args,
        "threads": args.threads,
        "ranks": args.ranks,
        "checkouts": [
            {"checkout": c, "commit": _commit(c), "baseline": c != checkouts[-1], "rounds": rounds[c]}
            for c in checkouts
        ],
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "machine": cli.machine(),
    }
    cli.write_json(out, record)
    print(f"bench_compile: results in {out}")
    return 0 if all(r["status"] == 0 for c in rounds.values() for runs in c for r in runs.values()) else 1


def _cold_and_warm(checkout: str, args: Any, app_args: list[str]) -> dict[str, dict[str, Any]]:
    """A run of ``checkout``'s app with an empty cache, then one with the cache it filled."""
    runs = {}
    with tempfile.TemporaryDirectory(prefix="pad-cache-") as cache:
        path = os.pathsep.join([checkout, *filter(None, [os.environ.get("PYTHONPATH")])])
        env = {**os.environ, "PAD_CACHE_DIR": cache, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
        env["NUMBA_CACHE_DIR"] = os.path.join(cache, "numba")
        if args.device == "cpu":
            env["NUMBA_NUM_THREADS"] = str(args.threads)
        for name in ("cold", "warm"):
            json_path = os.path.join(cache, f"{name}.json")
            cmd = [sys.executable, "-m", f"apps.{args.app}", *app_args, "--device", args.device]
            cmd += ["--json", json_path] + (["--threads", str(args.threads)] if args.device == "cpu" else [])
            if args.ranks > 1:
                cmd = [os.path.join(os.path.dirname(sys.executable), "mpiexec"), "-n", str(args.ranks), *cmd]
            runs[name] = run(cmd, checkout, env) | {"result": _record(json_path)}
    return runs


def _items(checkout: str, args: Any, app_args: list[str]) -> dict[str, dict[str, Any]]:
    """The items of ``checkout``'s app's ``pad.precompile``, each compiled alone (``ITEMS``)."""
    with tempfile.TemporaryDirectory(prefix="pad-cache-") as cache:
        path = os.pathsep.join([checkout, *filter(None, [os.environ.get("PYTHONPATH")])])
        out = os.path.join(cache, "items.json")
        env = {**os.environ, "PAD_CACHE_DIR": cache, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
        env |= {"NUMBA_CACHE_DIR": os.path.join(cache, "numba")}
        env |= {"NUMBA_NUM_THREADS": str(args.threads), "PAD_ITEMS_JSON": out}
        cmd = [sys.executable, "-c", ITEMS, args.app, *app_args, "--device", args.device]
        cmd += ["--threads", str(args.threads)] if args.device == "cpu" else []
        r = run(cmd, checkout, env) | {"command": [*cmd[:2], "ITEMS", *cmd[3:]]}
        items = _record(out)
        return {"items": r | {"result": None if items is None else {"items": items}}}


def _commit(checkout: str) -> str:
    return (cli.command_output(["git", "-C", checkout, "rev-parse", "--short", "HEAD"]) or "").strip()


def _name(checkout: str) -> str:
    return _commit(checkout) or os.path.basename(checkout)


def _record(path: str) -> Any:
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        record: Any = json.load(fh)
    return record


def _summary(name: str, r: dict[str, Any]) -> str:
    text = f"{name}: exit status {r['status']}, {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU"
    result = r["result"]
    if result is None:
        return text + "; no record:\n" + r["output"] + r["errors"]
    if "items" in result:
        items = result["items"]
        return text + f"; {len(items)} items, {sum(i['cpu_s'] for i in items):.1f} s CPU compiling them"
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
