"""``python -m scripts.scale``: a scaling study of a pad app, every point's results in one JSON-lines file.

For each mode, worker count, size and repeat it runs the app's command line once: ``--threads N`` in one
process (``--kind threads``), under ``mpiexec -n N`` with one thread per rank (``--kind ranks``; T threads
each with ``--threads-per-rank T``), or under ``mpiexec`` on N GPUs (``--kind gpus``: ``--device gpu``,
``--ranks-per-gpu K`` ranks on each, one by default, and ``gpu_round_robin.sh`` sets each rank's
``CUDA_VISIBLE_DEVICES`` to one of the N, round-robin; with ``--mps`` the ranks sharing a GPU run their
kernels side by side under NVIDIA's Multi-Process Service, whose daemon the study starts and stops). Each
point appends one line as soon as it ends, so a later failure loses nothing:

    {"study", "app", "mode", "kind", "workers", "scaling", "size", "ranks", "threads", "repeat",
     "ranks_per_gpu", "mps", "command", "started", "wall_s", "ok", "error", "result", "machine"}

``result`` is the app's ``--json`` record (None if it wrote none), ``error`` why the point failed (None when
it did not), ``machine`` the host (CPU model, cores, GPUs, library versions, pad commit, date). A failed
point (the app's exit status, a check failing, a launcher missing, more GPUs asked for than the machine has,
a timeout) is recorded and the study goes on; failures are listed at the end and the exit status is 1.

Sizes: miniBUDE's is poses (``--poses``; by default the whole deck), LULESH's the mesh edge. Strong scaling
keeps the total problem (LULESH ranks split ``-s SIZE`` into ``-s SIZE/cbrt(ranks)`` each); weak scaling
gives every thread or rank ``SIZE`` (miniBUDE: ``SIZE`` poses each; LULESH: ``SIZE**3`` elements each, i.e.
``-s SIZE`` per rank). LULESH needs a cube number of ranks. Arguments after ``--`` go to the app.

    python -m scripts.scale minibude --kind threads --workers 1 2 4 --modes primal grad -- --deck bm1
    python -m scripts.scale lulesh --kind ranks --workers 1 8 --sizes 60 --iterations 50 --modes primal grad
    python -m scripts.scale lulesh --kind gpus --workers 1 2 --ranks-per-gpu 1 4 --sizes 120 --iterations 50
    python -m scripts.scale lulesh --kind gpus --workers 2 --ranks-per-gpu 4 --sizes 60 --scaling weak --mps
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from apps import cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPU_WRAPPER = os.path.join(REPO, "scripts", "gpu_round_robin.sh")
APPS = ("minibude", "lulesh")
MODES = {"minibude": ("primal", "grad"), "lulesh": ("primal", "grad", "sensitivity")}
KINDS = ("threads", "ranks", "gpus")
ERROR_TAIL = 2000  # characters of the app's output kept with a failed point
PROBE_TIMEOUT = 120  # seconds the launcher's check may take


@dataclass(frozen=True)
class Point:
    """One run of the app: a mode, a worker count (threads, ranks or GPUs), a size (None: the app's whole
    default problem); on GPUs, the ranks on each."""

    app: str
    mode: str
    kind: str
    workers: int
    scaling: str
    size: int | None
    repeat: int = 0
    per_rank: int = 1  # threads of each rank (kind ranks)
    ranks_per_gpu: int = 1

    @property
    def ranks(self) -> int:
        return 1 if self.kind == "threads" else self.workers * self.ranks_per_gpu

    @property
    def shares(self) -> int:
        """The parts weak scaling gives ``size`` each: the threads, or the ranks."""
        return self.workers if self.kind == "threads" else self.ranks

    @property
    def threads(self) -> int:
        return self.workers if self.kind == "threads" else self.per_rank


def _icbrt(n: int) -> int | None:
    """The integer cube root of ``n``, or None if ``n`` is not a cube."""
    root = round(n ** (1.0 / 3.0))
    return root if root**3 == n else None


def lulesh_edge(point: Point) -> int:
    """LULESH's ``-s`` (elements per side per rank) at ``point``; ValueError if the mesh cannot be split so."""
    if _icbrt(point.ranks) is None:
        raise ValueError(f"LULESH needs a cube number of ranks (1, 8, 27, ...), not {point.ranks}")
    size = 30 if point.size is None else point.size
    elements = size**3 * (point.shares if point.scaling == "weak" else 1)
    edge = _icbrt(elements // point.ranks) if elements % point.ranks == 0 else None
    if edge is None:
        raise ValueError(
            f"LULESH {point.scaling} scaling of size {size} on {point.workers} {point.kind}: "
            f"{elements} elements do not make {point.ranks} equal cube(s), one per rank"
        )
    return edge


def app_arguments(point: Point, iterations: int | None, json_path: str) -> list[str]:
    """The app's own flags at ``point`` (the study's extra arguments are appended after them)."""
    device = "gpu" if point.kind == "gpus" else "cpu"
    common = ["--mode", point.mode, "--threads", str(point.threads), "--device", device, "--json", json_path]
    if point.app == "lulesh":
        args = ["-q", "-s", str(lulesh_edge(point)), *common]
        return args + (["-i", str(iterations)] if iterations is not None else [])
    args = common
    if point.size is not None:
        args += ["--poses", str(point.size * (point.shares if point.scaling == "weak" else 1))]
    elif point.scaling == "weak":
        raise ValueError("miniBUDE weak scaling needs --sizes (poses per worker)")
    return args + (["--iterations", str(iterations)] if iterations is not None else [])


def command(
    point: Point, iterations: int | None, json_path: str, extra: list[str], python: str, mpiexec: list[str]
) -> list[str]:
    """The full command line of ``point``: the launcher (for ranks and gpus), then the app."""
    app = [python, "-m", f"apps.{point.app}", *app_arguments(point, iterations, json_path), *extra]
    if point.kind == "threads":
        return app
    wrapper = ["bash", GPU_WRAPPER, "--gpus", str(point.workers)] if point.kind == "gpus" else []
    return [*mpiexec, "-n", str(point.ranks), *wrapper, *app]


def environment(point: Point, launcher: Launcher | None = None) -> dict[str, str]:
    """The point's environment: numba gets exactly its threads, pad and the apps import from this checkout
    (the app runs in the caller's directory, where relative paths among its arguments point), and the
    launcher what it needs (``Launcher.environment``)."""
    path = os.environ.get("PYTHONPATH")
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "NUMBA_NUM_THREADS": str(point.threads),
        "PYTHONPATH": REPO + (os.pathsep + path if path else ""),
        **(launcher.environment if launcher is not None and point.kind != "threads" else {}),
    }


# ------------------------------------------------------------------------------------------------ MPS
MPS_CONTROL = "nvidia-cuda-mps-control"


class MPSError(RuntimeError):
    """NVIDIA's MPS control daemon could not be started (one line)."""


@contextlib.contextmanager
def mps_daemon(where: str) -> Iterator[dict[str, str]]:
    """NVIDIA's Multi-Process Service for the study's GPU points: its control daemon started with its pipes
    and logs under ``where``, stopped (``quit``) when the study ends, failed or not. Yields the environment
    that makes the points' processes its clients. Under MPS the processes sharing a GPU run their kernels
    side by side in one context; without it the GPU switches between their contexts in time slices."""
    control = shutil.which(MPS_CONTROL)
    if control is None:
        raise MPSError(f"--mps: {MPS_CONTROL} is not on PATH (it comes with NVIDIA's driver)")
    environment = {
        "CUDA_MPS_PIPE_DIRECTORY": os.path.join(where, "mps-pipe"),
        "CUDA_MPS_LOG_DIRECTORY": os.path.join(where, "mps-log"),
    }
    for folder in environment.values():
        os.makedirs(folder, exist_ok=True)
    env = {**os.environ, **environment}
    started = subprocess.run([control, "-d"], env=env, capture_output=True, text=True, timeout=PROBE_TIMEOUT)
    if started.returncode != 0:
        said = (started.stderr or started.stdout).strip().splitlines()
        raise MPSError(f"--mps: {MPS_CONTROL} -d exited with status {started.returncode}: {' '.join(said)}")
    try:
        yield environment
    finally:
        subprocess.run(
            [control], input="quit\n", env=env, capture_output=True, text=True, timeout=PROBE_TIMEOUT
        )


# ------------------------------------------------------------------------------------------------ the launcher
class LauncherError(RuntimeError):
    """The MPI launcher is missing or does not start ranks of one job for mpi4py's MPI (one line)."""


@dataclass
class Launcher:
    """The MPI launcher of a study: its command, what it is (``flavour``: MPICH's Hydra, Open MPI, Slurm's
    srun, ...), and the MPI library mpi4py was built against."""

    command: list[str]
    flavour: str
    version: str | None
    library: str

    @property
    def environment(self) -> dict[str, str]:
        """Open MPI's mpirun refuses to run as root unless told to (its flag ``--allow-run-as-root`` is Open
        MPI's only: set here through its environment, for root only)."""
        if self.flavour == "Open MPI" and hasattr(os, "geteuid") and os.geteuid() == 0:
            return {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
        return {}

    def describe(self) -> str:
        return f"{shlex.join(self.command)} ({self.version or self.flavour})"


PROBE = (  # rank 0 of each job writes the sizes its ranks see, in one write: "2 2" for one job of 2, else "1"s
    "import os; from mpi4py import MPI; sizes = MPI.COMM_WORLD.allgather(MPI.COMM_WORLD.Get_size()); "
    "MPI.COMM_WORLD.Get_rank() or os.write(1, ('pad-probe %s;' % ' '.join(map(str, sizes))).encode())"
)
LIBRARY = (
    "import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; "
    "print(' '.join(MPI.Get_library_version().strip().splitlines()[0].split()))"
)


def flavour(version: str | None, command: list[str]) -> str:
    """What a launcher is, from its ``--version`` text (or its name, for srun)."""
    text = version or ""
    if os.path.basename(command[0]) == "srun" or text.startswith("slurm"):
        return "Slurm"
    for name, marks in (
        ("Open MPI", ("Open MPI", "OpenRTE", "PRRTE", "prte")),
        ("Intel MPI", ("Intel(R) MPI",)),
    ):
        if any(mark in text for mark in marks):
            return name
    return "MPICH" if "Hydra" in text or "HYDRA" in text else "unknown"


def find_launcher(mpiexec: str, python: str) -> Launcher:
    """The launcher ``mpiexec``, checked: found, and starting two ranks that mpi4py's MPI (in ``python``)
    joins into one job. LauncherError otherwise, one line naming the launcher and mpi4py's MPI."""
    command = shlex.split(mpiexec)
    library = (
        cli.command_output([python, "-c", LIBRARY]) or ""
    ).strip() or f"none: mpi4py does not load in {python}"
    if not command or shutil.which(command[0]) is None:
        raise LauncherError(
            f"launcher {mpiexec!r} not found (mpi4py's MPI: {library}); give its launcher with --mpiexec or "
            "PAD_MPIEXEC"
        )
    launcher = Launcher(command, "unknown", cli.launcher_version(command), library)
    launcher.flavour = flavour(launcher.version, command)
    probe = [*command, "-n", "2", python, "-c", PROBE]
    env = {**os.environ, **launcher.environment}
    try:
        proc = subprocess.run(probe, capture_output=True, text=True, timeout=PROBE_TIMEOUT, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LauncherError(
            f"{launcher.describe()} could not start 2 ranks of mpi4py's MPI ({library}): {exc}"
        ) from None
    jobs = re.findall(r"pad-probe ([\d ]+);", proc.stdout)
    if proc.returncode == 0 and [job.split() for job in jobs] == [["2", "2"]]:
        return launcher
    if proc.returncode == 0:
        why = "their COMM_WORLD sizes were " + (", ".join(" ".join(jobs).split()) or "not printed")
    else:
        why = f"exit status {proc.returncode}: " + " ".join((proc.stderr or proc.stdout).split())[:300]
    raise LauncherError(
        f"{launcher.describe()} does not start ranks of one job for mpi4py's MPI ({library}): asked for 2, "
        f"{why}; use the launcher of that MPI (--mpiexec or PAD_MPIEXEC)"
    )


# ------------------------------------------------------------------------------------------------ running
def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= ERROR_TAIL else "..." + text[-ERROR_TAIL:]


def run_point(
    cmd: list[str], env: dict[str, str], json_path: str, timeout: float | None
) -> tuple[dict[str, Any] | None, str | None]:
    """Run one point; returns (the app's record or None, None or why the point failed)."""
    try:
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # a timeout kills the launcher and every rank it started
        )
    except OSError as exc:
        return None, f"cannot start {cmd[0]!r}: {exc.strerror or exc}"
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return None, f"timed out after {timeout:g} s: {_tail(output)}"
    record = _record(json_path)
    if proc.returncode != 0:
        return record, f"exit status {proc.returncode}: {_tail(output)}"
    if record is None:
        return None, f"the app wrote no --json record: {_tail(output)}"
    if record.get("valid") is not True:
        return record, f"the app's checks failed (valid: {record.get('valid')}): {record.get('checks')}"
    return record, None


def _record(path: str) -> dict[str, Any] | None:
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def plan(args: argparse.Namespace) -> list[Point]:
    """Every point of the study, in the order they run; ValueError if one cannot be built."""
    sizes: list[int | None] = list(args.sizes) if args.sizes else [None]
    per_gpu = args.ranks_per_gpu * (len(args.workers) if len(args.ranks_per_gpu) == 1 else 1)
    points = [
        Point(
            args.app,
            mode,
            args.kind,
            workers,
            args.scaling,
            size,
            repeat,
            args.threads_per_rank,
            ranks_per_gpu,
        )
        for size in sizes
        for workers, ranks_per_gpu in zip(args.workers, per_gpu, strict=True)
        for mode in args.modes
        for repeat in range(args.repeat)
    ]
    for point in points:
        app_arguments(point, args.iterations, "check.json")  # raises ValueError naming what cannot be run
    return points


def _where(point: Point) -> str:
    """``grad 2 gpus (8 ranks) size 120``."""
    ranks = f" ({point.ranks} ranks)" if point.ranks_per_gpu > 1 else ""
    return f"{point.mode} {point.workers} {point.kind}{ranks}" + (f" size {point.size}" if point.size else "")


def _summary(point: Point, record: dict[str, Any] | None, error: str | None) -> str:
    where = _where(point)
    if error is not None or record is None:
        return f"{where}: FAILED: {(error or '').splitlines()[0][:200]}"
    text = f"{where}: primal {record['time_primal_s'] * 1e3:.3f} ms"
    if record.get("time_grad_s") is not None:
        text += f", gradient {record['time_grad_s'] * 1e3:.3f} ms ({record['overhead']:.2f}x)"
    return text


def _progress(points: list[Point], label: str) -> tuple[Any, Callable[[str], None]]:
    """The points under a tqdm progress bar on a terminal, and how to print a line beside it."""
    try:
        from tqdm import tqdm
    except ImportError:  # a GPU host without a package index may lack it; the per-point lines remain
        return points, print
    return tqdm(points, unit="point", desc=label, disable=None), tqdm.write


def study(args: argparse.Namespace, extra: list[str]) -> int:
    points = plan(args)
    mpiexec = shlex.split(args.mpiexec)
    launcher = None
    if any(point.kind != "threads" for point in points):
        try:
            launcher = find_launcher(args.mpiexec, args.python)
        except LauncherError as exc:
            print(f"scale: error: {exc}", file=sys.stderr)
            return cli.EXIT_BAD_INPUT
    machine = cli.machine(mpiexec if launcher is not None else None)
    if launcher is not None:
        machine |= {"launcher_flavour": launcher.flavour, "mpi_library": launcher.library}
    gpus = len(machine["gpus"])
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    started = cli.utc_now()
    print(
        f"scale: {len(points)} points of {args.app} on {args.kind}; results appended to {args.out}",
        flush=True,
    )
    failures: list[tuple[Point, str]] = []
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="pad-scale-"))
        try:
            mps = stack.enter_context(mps_daemon(tmp)) if args.mps else {}
        except MPSError as exc:
            print(f"scale: error: {exc}", file=sys.stderr)
            return cli.EXIT_BAD_INPUT
        out = stack.enter_context(open(args.out, "a"))
        bar, write = _progress(points, f"{args.app} {args.kind}")
        for point in bar:
            json_path = os.path.join(tmp, "result.json")
            if os.path.exists(json_path):
                os.remove(json_path)
            cmd = command(point, args.iterations, json_path, extra, args.python, mpiexec)
            begin = time.perf_counter()
            record: dict[str, Any] | None = None
            error: str | None
            if point.kind == "gpus" and point.workers > gpus:
                error = f"asked for {point.workers} GPU(s), this machine has {gpus} (nvidia-smi)"
            else:
                record, error = run_point(cmd, environment(point, launcher) | mps, json_path, args.timeout)
            line = {
                "study": started,
                **asdict(point),
                "ranks": point.ranks,
                "threads": point.threads,
                "mps": args.mps,
                "command": shlex.join(cmd),
                "started": cli.utc_now(),
                "wall_s": time.perf_counter() - begin,
                "ok": error is None,
                "error": error,
                "result": record,
                "machine": machine,
            }
            out.write(json.dumps(line) + "\n")
            out.flush()
            write(_summary(point, record, error))
            if error is not None:
                failures.append((point, error))
    print(f"scale: {len(points) - len(failures)} of {len(points)} points ran; results in {args.out}")
    for point, error in failures:
        print(f"  FAILED {_where(point)}: {error}", file=sys.stderr)
    return 1 if failures else 0


def default_mpiexec() -> str:
    """$PAD_MPIEXEC, else the mpiexec beside this Python (a venv's: the mpich wheel's), else mpiexec on PATH."""
    venv = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return os.environ.get("PAD_MPIEXEC") or (venv if os.path.exists(venv) else "mpiexec")


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The study's arguments, and the app's extra arguments (those after ``--``)."""
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(
        prog="python -m scripts.scale", description=__doc__.split("\n")[0], formatter_class=cli.HelpFormatter
    )
    p.add_argument("app", choices=APPS)
    p.add_argument("--kind", choices=KINDS, required=True, help="what the workers are")
    p.add_argument(
        "--workers", type=cli.integer(1), nargs="+", required=True, metavar="N", help="worker counts"
    )
    p.add_argument(
        "--modes", nargs="+", default=["primal", "grad"], help="primal, grad, sensitivity (LULESH)"
    )
    p.add_argument(
        "--sizes", type=cli.integer(1), nargs="+", metavar="S", help="miniBUDE poses, LULESH mesh edge"
    )
    p.add_argument(
        "--ranks-per-gpu", type=cli.integer(1), nargs="+", default=[1], metavar="K",
        help="--kind gpus: ranks sharing each GPU, one value or one per --workers entry (default 1)",
    )  # fmt: skip
    p.add_argument(
        "--mps", action="store_true",
        help="--kind gpus: run the points under NVIDIA's MPS (the study starts and stops its daemon), so that "
        "ranks sharing a GPU run their kernels side by side",
    )  # fmt: skip
    p.add_argument("--scaling", choices=("strong", "weak"), default="strong")
    p.add_argument(
        "--threads-per-rank",
        type=cli.integer(1),
        default=1,
        metavar="T",
        help="--kind ranks: threads of each rank",
    )
    p.add_argument(
        "--iterations", type=cli.integer(1), help="iterations (LULESH: cycles); default: the app's"
    )
    p.add_argument("--repeat", type=cli.integer(1), default=1, help="runs of each point (default 1)")
    p.add_argument(
        "--out", help="JSON-lines file to append to (default: results/studies/APP-KIND-SCALING.jsonl)"
    )
    p.add_argument(
        "--mpiexec",
        default=default_mpiexec(),
        help="the MPI launcher, checked before the study (default: $PAD_MPIEXEC, else the mpiexec beside "
        "this Python, else mpiexec on PATH: here %(default)s)",
    )
    p.add_argument("--python", default=sys.executable, help="the Python that runs the app")
    p.add_argument("--timeout", type=float, help="seconds a point may take before it is killed and failed")
    p.add_argument("--dry-run", action="store_true", help="print the command lines and run nothing")
    args = p.parse_args(own)
    if args.ranks_per_gpu != [1] and args.kind != "gpus":
        p.error("--ranks-per-gpu: only with --kind gpus")
    if args.mps and args.kind != "gpus":
        p.error("--mps: only with --kind gpus")
    if len(args.ranks_per_gpu) not in (1, len(args.workers)):
        p.error(f"--ranks-per-gpu: one value, or one per --workers entry ({len(args.workers)})")
    bad = [m for m in args.modes if m not in MODES[args.app]]
    if bad:
        p.error(f"--modes: {args.app} has no mode {bad[0]} (its modes: {', '.join(MODES[args.app])})")
    if args.out is None:
        args.out = os.path.join("results", "studies", f"{args.app}-{args.kind}-{args.scaling}.jsonl")
    args.out = os.path.abspath(args.out)
    try:
        plan(args)
    except ValueError as exc:
        p.error(str(exc))
    return args, extra


def main(argv: list[str] | None = None) -> int:
    args, extra = parse_args(sys.argv[1:] if argv is None else argv)
    if args.dry_run:
        mpiexec = shlex.split(args.mpiexec)
        for point in plan(args):
            print(shlex.join(command(point, args.iterations, "RESULT.json", extra, args.python, mpiexec)))
        return 0
    return study(args, extra)


if __name__ == "__main__":
    sys.exit(main())
