"""Results files for the docs: record a benchmark run, and render the docs' tables from the records.

    python scripts/results.py record docs/results/kernels.json --machine "2-core VM" -- python scripts/bench_kernels.py
    python scripts/results.py render            # rewrite the marked regions of README.md and docs/*.md
    python scripts/results.py render --check    # exit 1 if a marked region differs from its records
    python scripts/results.py studies [FOLDER]  # print the tables of the scaling studies in FOLDER

``record`` runs the command with ``--json <temporary file>`` appended (every benchmark script and app takes
``--json``) and writes one record: the command as given, the machine, the UTC date, the git commit, the
machine's load average when the command started and ended (other work on a shared machine slows a run), and
the result the command wrote. A doc names a table by a marked region; ``render`` fills it from the records:

    <!-- results:kernels -->
    (generated: do not edit)
    <!-- /results:kernels -->
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "results"
STUDIES = ROOT / "results" / "studies"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
REGION = re.compile(r"(<!-- results:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /results:(?P=name) -->)", re.S)

Record = dict[str, Any]


# ---------------------------------------------------------------------------------------------- recording
def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def record(path: Path, machine: str, command: list[str]) -> None:
    """Run ``command --json TMP`` and write its result with where, when and from which commit it came."""
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        subprocess.run([*command, "--json", str(out)], cwd=ROOT, check=True)
        result = json.loads(out.read_text())
    cores = len(re.findall(r"^processor", Path("/proc/cpuinfo").read_text(), re.M))
    entry = {
        "command": shlex.join(command),
        "machine": f"{machine} ({_cpu()}, {cores} cores)",
        "date": date,
        "commit": commit,
        "load_average": [round(load, 2), round(os.getloadavg()[0], 2)],  # 1-minute, at start and end
        "result": result,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entry, indent=1) + "\n")
    print(f"wrote {path}")


# ---------------------------------------------------------------------------------------------- tables
def _load(pattern: str) -> list[Record]:
    """The records matching ``pattern``, in their names' order, numbers as numbers (``-2`` before ``-10``)."""
    paths = sorted(
        RECORDS.glob(pattern),
        key=lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)],
    )
    return [json.loads(p.read_text()) for p in paths]


def _one(pattern: str) -> Record:
    (rec,) = _load(pattern)
    return rec


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


def _when(rec: Record) -> str:
    if rec.get("load_average") is None:  # a run on the lent device host, which is not shared
        return f"{rec['machine']}, {rec['date']}"
    start, end = rec["load_average"]
    return f"{rec['machine']}, {rec['date']} ({start:.1f} -> {end:.1f})"


def _source(rec: Record) -> str:
    return f"`{rec['command']}` on {_when(rec)}, commit {rec['commit']}"


def _caption(*recs: Record) -> list[str]:
    return ["", *(f"From {_source(r)}." for r in recs)]


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.0f} ms" if ms >= 100 else f"{ms:.3g} ms"


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.3g} µs"


def _time(seconds: float) -> str:
    return _us(seconds) if seconds < 1e-3 else _ms(seconds)


def _bytes(n: int) -> str:
    return f"{n // 2**20} MiB" if n >= 2**20 else f"{n // 2**10} KiB" if n >= 2**10 else f"{n} B"


def kernels() -> list[str]:
    rec = _one("kernels.json")
    r = rec["result"]
    rows = [[c["name"], _ms(c["primal_s"]), _ms(c["gradient_s"]), f"{c['ratio']:.2f}x"] for c in r["cases"]]
    s = r["thread_scaling_pairwise"]
    rows.append(["empty launch", _us(r["empty_launch_us"] * 1e-6), "", ""])
    rows.append([f"pairwise gradient, {s['threads']} threads vs 1", "", "", f"{s['speedup']:.2f}x faster"])
    return [*_table(["case", "primal", "gradient", "gradient / primal"], rows), *_caption(rec)]


def minibude() -> list[str]:
    recs = _load("minibude-*.json")
    rows = []
    for rec in recs:
        r = rec["result"]
        rows.append(
            [
                str(r["ranks"]),
                str(r["threads"]),
                r["wrt"],
                f"{r['ginteractions_per_s']:.2f}",
                _ms(r["time_primal_s"]),
                _ms(r["time_grad_s"]),
                f"{r['overhead']:.2f}x",
            ]
        )
    header = [
        "ranks",
        "threads",
        "gradient wrt",
        "energies, G-interactions/s",
        "energies",
        "gradient",
        "ratio",
    ]
    return [*_table(header, rows), *_caption(*recs)]


def cpu_minibude_alternating() -> list[str]:
    """miniBUDE's gradient against its energies, alternating in one process (``bench_minibude.py``)."""
    recs = _load("cpu-minibude-alternating-*.json")
    rows = [
        [
            rec["date"],
            rec["commit"],
            r["deck"],
            r["wrt"],
            str(r["threads"]),
            _ms(r["energies_s"]),
            _ms(r["gradient_s"]),
            f"{r['ratio']:.2f}x",
            f"{r['median_ratio']:.2f}x",
        ]
        for rec in recs
        for r in rec["result"]["rows"]
    ]
    header = [
        "run",
        "commit",
        "deck",
        "gradient wrt",
        "threads",
        "energies",
        "gradient",
        "gradient / energies",
        "medians",
    ]
    return [*_table(header, rows), *_caption(*recs)]


def minibude_gpu() -> list[str]:
    """pad's miniBUDE gradients on a GPU beside the JAX peer's, from one session on one machine."""
    jax = _one("gpu-minibude-jax.json")
    j = jax["result"]
    recs = [rec for rec in _load("gpu-minibude-*.json") if "wrt" in rec["result"]]
    rows = []
    for rec in recs:
        r = rec["result"]
        wrt = r["wrt"]
        theirs = j[f"time_grad_{wrt}_s"]
        rows.append(
            [
                wrt,
                _ms(r["time_primal_s"]),
                _ms(r["time_grad_s"]),
                f"{r['overhead']:.2f}x",
                _ms(j["time_energies_s"]),
                _ms(theirs),
                f"{j[f'overhead_grad_{wrt}']:.2f}x",
                f"{theirs / r['time_grad_s']:.2f}x",
            ]
        )
    header = [
        "gradient wrt",
        "pad energies",
        "pad gradient",
        "pad ratio",
        "JAX energies",
        "JAX gradient",
        "JAX ratio",
        "JAX gradient / pad gradient",
    ]
    return [*_table(header, rows), *_caption(*recs, jax)]


def minibude_gpu_hand() -> list[str]:
    """pad's fused miniBUDE gradient wrt the protein on a GPU beside a hand-written kernel of the same design."""
    rec = _one("gpu-minibude-hand.json")
    r = rec["result"]
    rows = [
        [what, _ms(r[f"{key}_s"]), f"{r[f'{key}_ratio']:.2f}x", f"{r['pad_gradient_s'] / r[f'{key}_s']:.2f}x"]
        for what, key in (
            ("pad (derived)", "pad_gradient"),
            ("hand-written, pad's rule at ties", "hand_split"),
            ("hand-written, slope only below the cut-off", "hand_below"),
        )
    ]
    header = ["gradient wrt the protein", "time", f"/ energies ({_ms(r['energies_s'])})", "pad / this"]
    return [*_table(header, rows), *_caption(rec)]


def gpu_kernels() -> list[str]:
    """``bench_gpu.py``: pad's kernel gradients on a GPU beside JAX's, and the cost of a launch."""
    rec = _one("gpu-kernels.json")
    r = rec["result"]
    rows = []
    for name, c in r["pad"].items():
        j = r["jax"].get(name, {})
        theirs = (
            [_ms(j["primal_s"]), _ms(j["gradient_s"]), f"{j['ratio']:.2f}x"] if "ratio" in j else ["", "", ""]
        )
        rows.append([name, _ms(c["primal_s"]), _ms(c["gradient_s"]), f"{c['ratio']:.2f}x", *theirs])
    launch = r["launch_overhead"]
    rows.append(["empty launch", _us(launch["pad_us"] * 1e-6), "", "", "", "", ""])
    header = ["case", "pad primal", "pad gradient", "pad ratio", "JAX primal", "JAX gradient", "JAX ratio"]
    return [*_table(header, rows), *_caption(rec)]


def lulesh_gpu() -> list[str]:
    """LULESH's per-cycle gradient on a GPU (``--mode grad --device gpu``)."""
    rec = _one("gpu-lulesh-grad.json")
    r = rec["result"]
    check = r["checks"]["gradient"]
    row = [
        f"-s {r['problem']['size']} -i {r['iterations']}",
        _ms(r["time_primal_s"]),
        _ms(r["time_grad_s"]),
        f"{r['overhead']:.2f}x",
        f"{check['dot_product']['rel_error']:.1e} / {check['direction']['rel_error']:.1e}",
    ]
    header = ["problem", "primal per cycle", "gradient per cycle", "ratio", "check: dot product / direction"]
    return [*_table(header, [row]), *_caption(rec)]


def _lulesh_case(r: dict[str, Any]) -> str:
    return f"-s {r['size']}" + (" to the end" if r["to_the_end"] else f" -i {r['iterations']}")


def lulesh_vs_cuda() -> list[str]:
    """LULESH on a GPU: pad against LLNL's CUDA port (``bench_lulesh_gpu.py``), both runs in one session."""
    rec = _one("gpu-lulesh-vs-cuda.json")
    rows = [
        [
            _lulesh_case(r),
            str(r["iterations"]),
            f"{r['fom_pad']:,.0f}",
            f"{r['fom_cuda']:,.0f}",
            f"{r['fom_ratio']:.2f}",
            f"{r['energy_pad']} / {r['energy_cuda']}",
        ]
        for r in rec["result"]["records"]
    ]
    header = [
        "problem",
        "cycles",
        "FOM pad (z/s)",
        "FOM CUDA port (z/s)",
        "pad / CUDA",
        "Final Origin Energy",
    ]
    return [*_table(header, rows), *_caption(rec)]


def lulesh() -> list[str]:
    """pad's LULESH against the C++ original (FOM: zones per ms), then the corner-force study, per record."""
    out = []
    for rec in _load("lulesh-*.json"):
        r = rec["result"]
        rows = []
        for row in r["rows"]:
            case = f"-s {row['size']} -i {row['iterations']}"
            where = "GPU" if row["device"] == "gpu" else f"{row['threads']} threads"
            theirs = (
                [f"{row['original_fom']:.0f}", f"{row['fom_ratio']:.2f}x"]
                if "original_fom" in row
                else ["", ""]
            )
            rows.append([case, where, f"{row['pad_fom']:.0f}", *theirs])
        out += _table(["case", "on", "pad FOM", "C++ FOM", "pad / C++"], rows)
        if r.get("forces"):
            forces = [
                [f"-s {f['size']}", str(f["threads"]), _ms(f["gather_s"]), _ms(f["scatter_s"])]
                for f in r["forces"]
            ]
            out += [
                "",
                *_table(["corner forces to nodes", "threads", "gather", "privatized scatter"], forces),
            ]
        out += [*_caption(rec), ""]
    return out[:-1]


def _cycles_case(size: int, after: int, start: str = "") -> str:
    """A LULESH case of a per-cycle study: its size, and the primal cycles run before it (else ``start``)."""
    return f"-s {size}" + (f", after {after} cycles" if after else start)


CYCLES_HEADER = ["run", "commit", "case", "threads", "primal cycle", "gradient cycle", "gradient / primal"]


def cpu_lulesh_per_cycle() -> list[str]:
    """LULESH's per-cycle gradient against its primal cycle, alternating in one process (``bench_lulesh.py
    --per-cycle``): per host instance, case and thread count, the best rounds, the median ratio, and how much
    faster primal and gradient cycle run than on one thread in the same record."""
    recs = _load("cpu-lulesh-per-cycle-*.json")
    rows = []
    for rec in recs:
        studies = rec["result"]["per_cycle"]
        one = {(p["size"], p.get("after", 0)): p for p in studies if p["threads"] == 1}
        for p in studies:
            base = one.get((p["size"], p.get("after", 0)))
            speedup = (
                f"{base['primal_cycle_s'] / p['primal_cycle_s']:.2f}x / "
                f"{base['gradient_cycle_s'] / p['gradient_cycle_s']:.2f}x"
                if base is not None and p["threads"] > 1
                else ""
            )
            rows.append(
                [
                    rec["date"],
                    rec["commit"],
                    _cycles_case(p["size"], p.get("after", 0)),
                    str(p["threads"]),
                    _ms(p["primal_cycle_s"]),
                    _ms(p["gradient_cycle_s"]),
                    f"{p['ratio']:.2f}x",
                    f"{p['median_ratio']:.2f}x",
                    speedup,
                ]
            )
    header = [*CYCLES_HEADER, "medians", "speed-up from 1 thread, primal / gradient"]
    return [*_table(header, rows), *_caption(*recs)]


def cpu_lulesh_speedup() -> list[str]:
    """LULESH's per-cycle primal and gradient on several thread counts in one process, the counts alternating
    round by round (``bench_lulesh.py --speedup``): per record, case and thread count, the best rounds, the
    gradient over the primal, and each cycle's speed-up over the fewest threads."""
    recs = _load("cpu-lulesh-speedup-*.json")
    rows = [
        [
            rec["date"],
            rec["commit"],
            _cycles_case(p["size"], p["after"]),
            str(n),
            _ms(p["primal_cycle_s"][str(n)]),
            _ms(p["gradient_cycle_s"][str(n)]),
            f"{p['gradient_cycle_s'][str(n)] / p['primal_cycle_s'][str(n)]:.2f}x",
            f"{p['primal_speedup'][str(n)]:.2f}x / {p['gradient_speedup'][str(n)]:.2f}x",
        ]
        for rec in recs
        for p in rec["result"]["speedup"]
        for n in p["threads"]
    ]
    header = [*CYCLES_HEADER, "speed-up, primal / gradient"]
    return [*_table(header, rows), *_caption(*recs)]


def cpu_lulesh_driver() -> list[str]:
    """LULESH's per-cycle primal and gradient with the replays' compiled driver and without, two LULESHs in
    one process advanced alternately (``bench_lulesh.py --driver-study``): best rounds, per run, case and
    thread count."""
    recs = _load("cpu-lulesh-driver-*.json")
    rows = [
        [
            rec["date"],
            rec["commit"],
            f"-s {p['size']}",
            str(p["threads"]),
            _ms(p["driver"]["primal_cycle_s"]),
            _ms(p["no_driver"]["primal_cycle_s"]),
            _ms(p["driver"]["gradient_cycle_s"]),
            _ms(p["no_driver"]["gradient_cycle_s"]),
            f"{p['driver']['ratio']:.2f}x",
            f"{p['no_driver']['ratio']:.2f}x",
        ]
        for rec in recs
        for p in rec["result"]["driver"]
    ]
    header = [
        "run",
        "commit",
        "case",
        "threads",
        "primal, driver",
        "primal, from Python",
        "gradient, driver",
        "gradient, from Python",
        "ratio, driver",
        "ratio, from Python",
    ]
    return [*_table(header, rows), *_caption(*recs)]


def cpu_lulesh_launches() -> list[str]:
    """Where a per-cycle gradient's time goes outside the compiled launchers (``bench_lulesh.py
    --launches``), as the calling thread's CPU time: per record, case and thread count, then split by kind."""
    out: list[str] = []
    for rec in _load("cpu-lulesh-launches-*.json"):
        out += [*([""] if out else []), *_launches(rec)]
    return out


def _launches(rec: Record) -> list[str]:
    studies = rec["result"]["launches"]
    rows = [
        [
            f"-s {p['size']}",
            str(p["threads"]),
            _ms(p["cycle_cpu_s"]),
            _ms(p["launchers_cpu_s"]),
            f"{p['launcher_calls']:.0f}",
            _ms(p["outside_s"]),
            f"{100 * p['outside_fraction']:.1f}%",
            _us(p["outside_s"] / p["launcher_calls"]),
        ]
        for p in studies
    ]
    header = [
        "case",
        "threads",
        "cycle",
        "in launchers",
        "launcher calls",
        "outside",
        "outside / cycle",
        "outside / call",
    ]
    kinds = sorted(
        {k for p in studies for k in p["outside_by_kind_s"]},
        key=lambda k: -studies[0]["outside_by_kind_s"].get(k, 0.0),
    )
    split = [
        [k, *(_us(p["outside_by_kind_s"].get(k, 0.0) / p["launcher_calls"]) for p in studies)] for k in kinds
    ]
    cases = [f"-s {p['size']}, {p['threads']} thr." for p in studies]
    return [*_table(header, rows), "", *_table(["outside, per launcher call", *cases], split), *_caption(rec)]


def cpu_lulesh_per_launcher() -> list[str]:
    """Each launcher of LULESH's per-cycle primal and gradient, timed from Python (``bench_lulesh.py
    --per-launcher``): per record and case, its time in each cycle on each thread count, and how much
    faster the gradient cycle's runs on the most threads than on the fewest. Launchers under 1% of the
    gradient cycle on the fewest threads are left out."""
    out: list[str] = []
    for rec in _load("cpu-lulesh-per-launcher-*.json"):
        studies = rec["result"]["per_launcher"]
        for size, after in dict.fromkeys((p["size"], p["after"]) for p in studies):
            runs = sorted(
                (p for p in studies if (p["size"], p["after"]) == (size, after)), key=lambda p: p["threads"]
            )
            few, many = runs[0], runs[-1]
            names = [n for n, t in few["gradient_launchers_s"].items() if t >= 0.01 * few["gradient_cycle_s"]]
            cells = [(cycle, n) for n in names for cycle in ("primal", "gradient")]
            rows = [
                [
                    f"{n}, {cycle} cycle",
                    *(_time(p[f"{cycle}_launchers_s"].get(n, 0.0)) for p in runs),
                    f"{few[f'{cycle}_launchers_s'][n] / many[f'{cycle}_launchers_s'][n]:.1f}x"
                    if n in few[f"{cycle}_launchers_s"] and many[f"{cycle}_launchers_s"].get(n)
                    else "",
                ]
                for cycle, n in cells
                if n in few[f"{cycle}_launchers_s"]
            ]
            rows += [
                [
                    f"{cycle} cycle",
                    *(_time(p[f"{cycle}_cycle_s"]) for p in runs),
                    f"{few[f'{cycle}_cycle_s'] / many[f'{cycle}_cycle_s']:.1f}x",
                ]
                for cycle in ("primal", "gradient")
            ]
            case = _cycles_case(size, after, ", cycle 4")
            header = [
                case,
                *(f"{p['threads']} thr." for p in runs),
                f"{few['threads']} -> {many['threads']} thr.",
            ]
            out += [*_table(header, rows), ""]
        out += [*_caption(rec)[1:], ""]
    return out[:-1]


def cpu_lulesh_plans() -> list[str]:
    """Scatter adjoints by plans against privatization, side by side in one run: LULESH's per-cycle gradient
    and primal, and miniBUDE bm1's gradient wrt the protein against its energies."""
    rec = _one("cpu-lulesh-plans.json")
    lulesh = [
        [
            r["case"],
            f"{r['ranks']} x {r['threads']}",
            r["code"],
            _ms(r["primal_s"]),
            _ms(r["grad_s"]),
            f"{r['grad_s'] / r['primal_s']:.2f}x",
        ]
        for r in rec["result"]["lulesh"]
    ]
    bude = [
        [
            str(r["threads"]),
            r["code"],
            _ms(r["energies_s"]),
            _ms(r["grad_s"]),
            f"{r['grad_s'] / r['energies_s']:.2f}x",
        ]
        for r in rec["result"]["minibude"]
    ]
    return [
        *_table(
            ["LULESH", "ranks x threads", "scatter adjoints", "primal", "gradient", "gradient / primal"],
            lulesh,
        ),
        "",
        *_table(
            ["miniBUDE bm1, threads", "scatter adjoints", "energies", "gradient (protein)", "ratio"], bude
        ),
        *_caption(rec),
    ]


def _spread(ratios: list[float]) -> str:
    """`` (a-bx, n runs)`` for several runs' ratios, nothing for one."""
    return f" ({min(ratios):.2f}-{max(ratios):.2f}x, {len(ratios)} runs)" if len(ratios) > 1 else ""


def lulesh_sensitivity() -> list[str]:
    """LULESH's whole-run gradient to completion (``bench_sensitivity.py``): per device and memory budget the
    gradient's time over the run's (of several runs the median and the range), the schedule, steps
    recomputed against the best offline schedule's, steps replayed from records, and the peak state memory
    measured."""
    rec = _one("sensitivity-lulesh.json")
    rows = [
        [
            c["device"] + (f", {c['threads']} threads" if c["device"] == "cpu" else ""),
            f"{c['memory'] / 1e9:.3g} GB",
            str(c["cycles"]),
            f"{c['time_primal_s']:.3g} s",
            f"{c['time_grad_s']:.3g} s",
            f"{c['overhead']:.2f}x" + _spread(c.get("overheads", [])),
            c["schedule"],
            f"{c['recomputed_steps']} ({c['optimal_recomputed_steps']})",
            str(c.get("replayed_steps", 0)),
            f"{c['peak_state_bytes'] / 1e9:.3g} GB",
        ]
        for c in rec["result"]["cases"]
    ]
    header = ["device", "budget", "cycles", "run", "gradient", "gradient / run", "schedule"]
    header += ["steps recomputed (best offline)", "steps replayed", "peak state"]
    return [*_table(header, rows), *_caption(rec)]


def lulesh_inverse() -> list[str]:
    """``docs/examples/lulesh_inverse.py``: per optimizer the solves it ran, its CPU time and how close it
    came to the hidden values."""
    rec = _one("inverse-lulesh.json")
    r = rec["result"]
    rows = [
        [
            method,
            str(m["forward_solves"]),
            str(m["adjoint_solves"]),
            f"{m['cpu_s']:.3g} s",
            f"{m['max_rel_error']:.1e}",
        ]
        for method, m in r["methods"].items()
    ]
    hidden = ", ".join(f"{n} = {v:.6g}" for n, v in r["hidden"].items())
    start = ", ".join(f"{n} = {v:.6g}" for n, v in r["start"].items())
    header = ["method", "forward solves", "adjoint solves", "CPU time", "largest relative error"]
    return [
        *_table(header, rows),
        "",
        f"LULESH -s {r['size']} to its stop time; hidden: {hidden}; start: {start}.",
        *_caption(rec),
    ]


def minibude_optimize() -> list[str]:
    """``scripts/bench_optimize.py``: miniBUDE's local optimizers at equal CPU time."""
    rec = _one("optimize-minibude.json")
    r = rec["result"]
    rows = [
        [
            f"{c['budget_cpu_s']:.3g} s",
            c["method"],
            str(c["steps"]),
            f"{c['mean_energy']:.2f}",
            f"{c['median_energy']:.2f}",
            str(c["poses_improved"]),
            str(c["poses_lowest"]),
        ]
        for c in r["cases"]
    ]
    header = ["CPU time", "method", "steps", "mean energy", "median energy", "poses improved", "poses lowest"]
    return [
        *_table(header, rows),
        "",
        f"{r['deck']}'s first {r['poses']} poses on {r['threads']} thread(s); at the start the mean energy is "
        f"{r['start_mean_energy']:.2f}, the median {r['start_median_energy']:.2f}.",
        *_caption(rec),
    ]


def mpi() -> list[str]:
    out = []
    for rec in _load("mpi-*.json"):
        r = rec["result"]
        sizes = sorted({row["bytes_per_rank"] for row in r["ops"]})
        by_op: dict[str, dict[int, dict[str, Any]]] = {}
        for row in r["ops"]:
            by_op.setdefault(row["op"], {})[row["bytes_per_rank"]] = row
        rows = [
            [f"`{op}`"]
            + [
                f"{_time(cells[n]['forward_s'])} / {_time(cells[n]['reverse_s'])}" if n in cells else ""
                for n in sizes
            ]
            for op, cells in by_op.items()
        ]
        header = [f"op, {r['ranks']} ranks"] + [f"{_bytes(n)}: forward / reverse" for n in sizes]
        o = r["overhead"]
        out += [
            *_table(header, rows),
            "",
            f"A pad call outside `autodiff` adds {o['overhead_COMM_WORLD_us']:.2f} µs to mpi4py's "
            f"(Allreduce of 8 B on COMM_WORLD: {o['mpi4py_COMM_WORLD_us']:.2f} µs).",
            *_caption(rec),
            "",
        ]
    return out[:-1]


def checkpoint() -> list[str]:
    rec = _one("checkpoint.json")
    r = rec["result"]
    rows = [
        [
            str(row["snapshots"]),
            f"{row['peak_traced_bytes'] / 2**20:.0f} MiB",
            f"{row['grad_over_primal']:.2f}x",
            str(row["step_calls"]),
        ]
        for row in r["rows"]
    ]
    t = r["targets"]
    return [
        *_table(["snapshots", "peak traced memory", "gradient / primal", "step calls"], rows),
        "",
        f"{r['cells']:,} cells, {r['steps']} steps: 30 snapshots peak at {t['memory_30_over_all']:.3f} of "
        f"keep-everything's memory, at {t['ratio_30_over_all']:.2f}x its gradient/primal time.",
        *_caption(rec),
    ]


def compile_times() -> list[str]:
    """First runs: an app started with an empty kernel cache and again with the cache filled, per checkout,
    the baseline first (``scripts/bench_compile.py``): of each kind of run the one of least CPU seconds over
    the rounds, and every round's CPU seconds."""
    out = []
    for rec in _load("compile-*.json"):
        r = rec["result"]
        if "items" in r["checkouts"][0]["rounds"][0]:
            continue  # compile_items'
        what = f"`{r['app']} {' '.join(r['arguments'])} --device {r['device']}`, {r['threads']} thread(s)"
        for c in r["checkouts"]:
            rows = []
            for name in ("cold", "warm"):
                runs = [rounds[name] for rounds in c["rounds"]]
                run = min(runs, key=lambda x: x["cpu_s"])
                res = run["result"]
                ahead = res.get("precompile")
                rows.append(
                    [
                        name,
                        f"{run['wall_s']:.1f} s",
                        f"{run['cpu_s']:.1f} s",
                        ", ".join(f"{x['cpu_s']:.1f}" for x in runs),
                        "not reported" if res.get("compile_s") is None else f"{res['compile_s']:.1f} s",
                        f"{ahead['compiled']} of {ahead['launchers']}, {ahead['workers']} worker(s)"
                        if ahead
                        else "",
                        _time(res["time_primal_s"]),
                        _time(res["time_grad_s"]) if res.get("time_grad_s") is not None else "",
                        f"{res['elapsed_s']:.3g} s" if "elapsed_s" in res else "",
                    ]
                )
            header = [
                "run",
                "wall",
                "CPU",
                "CPU, each round",
                "compile_s",
                "compiled ahead",
                "primal",
                "gradient",
                "Elapsed",
            ]
            role = "baseline" if c["baseline"] else "checkout"
            out += [
                f"**{role} {c['commit'] or os.path.basename(c['checkout'])}**: {what}",
                "",
                *_table(header, rows),
                "",
            ]
        out += [*_caption(rec), ""]
    return out[:-1]


def compile_items() -> list[str]:
    """Where a first run's compiling goes: ``pad.precompile``'s items of an app, each compiled alone, per
    checkout (``scripts/bench_compile.py --items``)."""
    out = []
    for rec in _load("compile-*.json"):
        r = rec["result"]
        if "items" not in r["checkouts"][0]["rounds"][0]:
            continue
        what = f"`{r['app']} {' '.join(r['arguments'])} --device {r['device']}`, {r['threads']} thread(s)"
        rows = []
        for c in r["checkouts"]:
            items = c["rounds"][0]["items"]["result"]["items"]
            kinds = sorted({i["kind"] for i in items})
            by_kind = [f"{sum(i['kind'] == k for i in items)} {k}s" for k in kinds]
            cpu = {k: sum(i["cpu_s"] for i in items if i["kind"] == k) for k in kinds}
            top = max(items, key=lambda i: i["cpu_s"])
            rows.append(
                [
                    f"{'baseline' if c['baseline'] else 'checkout'} {c['commit'] or os.path.basename(c['checkout'])}",
                    ", ".join(by_kind),
                    f"{sum(cpu.values()):.1f} s",
                    ", ".join(f"{k}s {v:.1f} s" for k, v in cpu.items()),
                    f"`{top['name']}` ({top['lines']:,} lines): {top['cpu_s']:.1f} s, LLVM {top['llvm_share']:.0%}",
                ]
            )
        header = ["checkout", "items", "CPU", "CPU by kind", "largest"]
        out += [what, "", *_table(header, rows), "", *_caption(rec), ""]
    return out[:-1]


def tasks() -> list[str]:
    rec = _one("tasks.json")
    r = rec["result"]
    rows = [
        [
            name,
            f"{v['forward_s']:.3f} s",
            f"{v['reverse_s']:.3f} s",
            f"{v['reverse_cpu_per_wall']:.2f}",
            f"{100 * v['reverse_share_in_launchers']:.1f}%",
        ]
        for name, v in r["results"].items()
    ]
    header = [
        "",
        "forward",
        "reverse pass",
        "CPU s per s in the reverse",
        "adjoint threads' time in launchers",
    ]
    return [
        *_table(header, rows),
        "",
        f"{r['chains']} chains of {r['length']} launches on {r['cells']:,} cells: the reverse pass is "
        f"{r['reverse_speedup_2_threads']:.2f}x faster on 2 threads (plain threads on the same launches: "
        f"{r['plain_threads_speedup']:.2f}x).",
        *_caption(rec),
    ]


def studies(folder: Path = STUDIES) -> list[str]:
    """One table per scaling study (``*.jsonl`` of ``scripts.scale`` in ``folder``, its latest run; earlier
    runs stay in the file as its history): per worker count (and
    size, where a study has several) the primal's and the gradient's time per iteration, their ratio (within
    the gradient run) and how each scales (strong scaling: the speed-up over the fewest workers; weak
    scaling: the efficiency). A study without primal points takes the primal times of its gradient runs."""
    out = []
    for path in sorted(folder.glob("*.jsonl")):
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        lines = [line for line in lines if line["study"] == lines[-1]["study"]]  # the latest run of the study
        ok = [line for line in lines if line["ok"]]
        # the load of a worker: ranks per GPU where ranks share GPUs (weak scaling then gives each GPU that
        # many ranks' problems), else one
        load = {
            p["workers"]: p.get("ranks", p["workers"]) / p["workers"] if p["kind"] == "gpus" else 1
            for p in ok
        }
        grad = {(p["size"], p["workers"]): p["result"] for p in ok if p["mode"] == "grad"}
        primal = {key: r["time_primal_s"] for key, r in grad.items()}
        primal |= {
            (p["size"], p["workers"]): p["result"]["time_primal_s"] for p in ok if p["mode"] == "primal"
        }
        keys = sorted(primal.keys() & grad.keys(), key=lambda k: (k[0] or 0, k[1]))
        if not keys:
            continue
        sizes = sorted({size for size, _ in keys}, key=lambda s: s or 0)
        weak = lines[0]["scaling"] == "weak"
        kind = lines[0]["kind"]
        rows = []
        for size, w in keys:
            first = min(k for k in keys if k[0] == size)
            tp, tg = primal[size, w], grad[size, w]["time_grad_s"]
            # strong scaling's speed-up and weak scaling's efficiency are both T(fewest workers) / T(these),
            # weak scaling's times as if every worker had the first one's load
            scale = load[w] / load[first[1]] if weak else 1.0
            scale_p, scale_g = scale * primal[first] / tp, scale * grad[first]["time_grad_s"] / tg
            ranks = round(load[w] * w)
            row = [
                f"{w} ({ranks} ranks{', MPS' if lines[0].get('mps') else ''})" if ranks != w else str(w),
                _ms(tp),
                _ms(tg),
                f"{grad[size, w]['overhead']:.2f}x",
                f"{scale_p:.2f}",
                f"{scale_g:.2f}",
            ]
            rows.append(([f"-s {size}"] if len(sizes) > 1 else []) + row)
        how = "efficiency" if weak else "speed-up"
        header = [
            *(["size"] if len(sizes) > 1 else []),
            kind,
            "primal / iteration",
            "gradient / iteration",
            "gradient / its process's primal",
            f"primal {how}",
            f"gradient {how}",
        ]
        failed = [f"{p['mode']} on {p['workers']} {kind}: {p['error']}" for p in lines if not p["ok"]]
        m = lines[0]["machine"]
        where = f"{m['cpu']}, {m['cores']} cores" + (f", {', '.join(m['gpus'])}" if m["gpus"] else "")
        commit = (m.get("pad_commit") or "?")[:7]
        source = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        out += [
            f"**{path.stem}** (`bash scripts/studies.sh OUT {path.stem}`):",
            "",
            *_table(header, rows),
            "",
            f"From `{source}`: {where}, {m['date'][:16].replace('T', ' ')} UTC, commit {commit}."
            + (f" Failed points: {'; '.join(failed)}." if failed else ""),
            "",
        ]
    return out[:-1]


def headline() -> list[str]:
    rows: list[tuple[str, str, Record]] = []
    k = _one("kernels.json")
    cases = {c["name"]: c for c in k["result"]["cases"]}
    for name in ("pairwise energy", "gather/scatter"):
        rows.append((f"kernel gradient / primal: {name}", f"{cases[name]['ratio']:.2f}x", k))
    rows.append(("empty kernel launch from Python", _us(k["result"]["empty_launch_us"] * 1e-6), k))
    for i, rec in enumerate(_load("minibude-t2-*.json")):
        r = rec["result"]
        if i == 0:
            rows.append(("miniBUDE bm1 energies, G-interactions/s", f"{r['ginteractions_per_s']:.2f}", rec))
        rows.append((f"miniBUDE bm1 gradient wrt {r['wrt']} / energies", f"{r['overhead']:.2f}x", rec))
    protein, jax = _one("gpu-minibude-protein.json"), _one("gpu-minibude-jax.json")
    r = protein["result"]
    rows.append(
        ("miniBUDE bm1 on an H100: gradient wrt protein / energies", f"{r['overhead']:.2f}x", protein)
    )
    speed = jax["result"]["time_grad_protein_s"] / r["time_grad_s"]
    rows.append(("miniBUDE bm1 on an H100: JAX's protein gradient / pad's", f"{speed:.2f}x", jax))
    vs_cuda = _one("gpu-lulesh-vs-cuda.json")
    for r in vs_cuda["result"]["records"]:
        if r["size"] in (30, 150):
            rows.append(
                (
                    f"LULESH {_lulesh_case(r)} on an H100: FOM / LLNL's CUDA port's",
                    f"{r['fom_ratio']:.2f}",
                    vs_cuda,
                )
            )
    for name in ("gpu-lulesh-grad.json", "gpu-lulesh-grad-s100.json", "gpu-lulesh-grad-s100-i1000.json"):
        lulesh_gpu = _one(name)
        r = lulesh_gpu["result"]
        card = "H200" if "H200" in lulesh_gpu["machine"] else "H100"
        case = f"-s {r['problem']['size']} -i {r['iterations']}"
        rows.append(
            (f"LULESH {case} on an {card}: per-cycle gradient / primal", f"{r['overhead']:.2f}x", lulesh_gpu)
        )
    m = _one("mpi-2.json")
    allreduce = next(
        o for o in m["result"]["ops"] if o["op"] == "Allreduce SUM" and o["bytes_per_rank"] == 65536
    )
    rows.append(("MPI Allreduce SUM of 64 KiB: reverse / forward", f"{allreduce['ratio']:.2f}x", m))
    c = _one("checkpoint.json")
    t = c["result"]["targets"]
    rows.append(
        ("checkpointing with 30 snapshots: memory / keep-everything", f"{t['memory_30_over_all']:.3f}", c)
    )
    ts = _one("tasks.json")
    speedup = ts["result"]["reverse_speedup_2_threads"]
    rows.append(("tasks: reverse pass on 2 threads vs 1", f"{speedup:.2f}x faster", ts))
    table = [[what, value, f"`{rec['command']}`", _when(rec)] for what, value, rec in rows]
    return _table(["result", "value", "command", "machine, date (load average at start -> end)"], table)


TABLES: dict[str, Callable[[], list[str]]] = {
    "headline": headline,
    "kernels": kernels,
    "minibude": minibude,
    "cpu-minibude-alternating": cpu_minibude_alternating,
    "minibude-gpu": minibude_gpu,
    "minibude-gpu-hand": minibude_gpu_hand,
    "gpu-kernels": gpu_kernels,
    "lulesh-gpu": lulesh_gpu,
    "lulesh-vs-cuda": lulesh_vs_cuda,
    "mpi": mpi,
    "checkpoint": checkpoint,
    "lulesh-sensitivity": lulesh_sensitivity,
    "lulesh-inverse": lulesh_inverse,
    "minibude-optimize": minibude_optimize,
    "lulesh": lulesh,
    "cpu-lulesh-driver": cpu_lulesh_driver,
    "cpu-lulesh-launches": cpu_lulesh_launches,
    "cpu-lulesh-per-launcher": cpu_lulesh_per_launcher,
    "cpu-lulesh-per-cycle": cpu_lulesh_per_cycle,
    "cpu-lulesh-speedup": cpu_lulesh_speedup,
    "cpu-lulesh-plans": cpu_lulesh_plans,
    "tasks": tasks,
    "studies": studies,
    "compile": compile_times,
    "compile-items": compile_items,
}


def render(check: bool) -> int:
    """Fill every marked region; with ``check``, only report the regions that differ. Returns 1 if any."""
    stale = []
    for page in PAGES:
        text = page.read_text()

        def fill(m: re.Match[str]) -> str:
            body = "\n".join(TABLES[m["name"]]()) + "\n"
            return m[1] + body + m[4]

        new = REGION.sub(fill, text)
        if new != text:
            stale.append(page.relative_to(ROOT))
            if not check:
                page.write_text(new)
    verb = "out of date" if check else "rendered"
    for page in stale:
        print(f"{verb}: {page}")
    return 1 if check and stale else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    rec = sub.add_parser(
        "record", help="run a command that takes --json and keep its result: record PATH --machine M -- CMD"
    )
    rec.add_argument("path", type=Path, help="the record to write, e.g. docs/results/kernels.json")
    rec.add_argument("--machine", required=True, help="what the machine is, e.g. '2-core VM, shared'")
    ren = sub.add_parser("render", help="fill the docs' marked regions from docs/results/")
    ren.add_argument("--check", action="store_true", help="change nothing; exit 1 if a region is stale")
    show = sub.add_parser("studies", help="print the tables of the scaling studies in a folder")
    show.add_argument("folder", type=Path, nargs="?", default=STUDIES, help="where the .jsonl files are")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args, command = parser.parse_args(argv[:split]), argv[split + 1 :]
    if args.action == "record":
        if not command:
            parser.error("record needs the command after --")
        record(args.path, args.machine, command)
        return 0
    if args.action == "studies":
        print("\n".join(studies(args.folder.resolve())))
        return 0
    return render(args.check)


if __name__ == "__main__":
    sys.exit(main())
