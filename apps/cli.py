"""What the apps' command lines and the scripts that run them share: argument checks, threads per rank, a
progress bar, where arrays live, and a description of the machine for results records."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib
import json
import os
import platform
import shlex
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from typing import Any, NoReturn

import numpy as np

EXIT_BAD_INPUT = 2
ABORT_GRACE = 0.2
"""Seconds a failing rank waits between writing its error and aborting every rank (``exit_status``)."""
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class InputError(ValueError):
    """Bad input (a flag, a file): one line naming it, exit status 2, before any work."""


class HelpFormatter(argparse.HelpFormatter):
    """Help that shows each option's default, unless it has none or its help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        shown = action.option_strings and not (default is None or default is False or default == [])
        shown = shown and default is not argparse.SUPPRESS
        return f"{text} (default: %(default)s)" if shown and "default" not in text else text


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that raises ``InputError`` instead of exiting, and shows defaults in its help."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise InputError(message)


def only_with(flag: str, mode: str, modes: tuple[str, ...]) -> None:
    """Refuse ``flag`` (given) unless ``--mode`` is one of ``modes``."""
    if mode not in modes:
        raise InputError(f"{flag}: only with " + " or ".join(f"--mode {m}" for m in modes))


def verdict(
    what: str, passed: bool, error: float | None = None, tolerance: float | None = None
) -> dict[str, Any]:
    """A check's record: what was checked, the error it found and the tolerance (when it measures one), and
    whether it passed."""
    return {"what": what, "error": error, "tolerance": tolerance, "passed": bool(passed)}


def check_lines(checks: dict[str, Any]) -> list[str]:
    """The human report of ``checks`` (name -> a ``verdict``, or a dict with a list of them in ``parts``): one
    line per verdict, saying what was checked, the error against the tolerance, and pass or FAIL."""
    lines = []
    for name, check in checks.items():
        for part in check.get("parts", [check]):
            measured = ""
            if part.get("error") is not None:
                measured = f": error {part['error']:.3g}"
                if part.get("tolerance") is not None:
                    measured += f", tolerance {part['tolerance']:.3g}"
            lines.append(f"check {name}: {part['what']}{measured}: {'pass' if part['passed'] else 'FAIL'}")
    return lines


def integer(low: int, too_small: str | None = None) -> Any:
    """An argparse type: an integer of at least ``low``; ``too_small`` says what is wrong with a smaller one
    (default ``"must be at least LOW"``)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} {too_small or f'must be at least {low}'}")
        return value

    return parse


def check_writable(flag: str, path: str | None) -> None:
    """Fail before any work if ``path`` cannot be written (so no results are lost at the end)."""
    if path is None:
        return
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise InputError(f"{flag}: directory {parent} does not exist")
    if os.path.isdir(path) or not os.access(parent, os.W_OK):
        raise InputError(f"{flag}: cannot write {path}")


def set_threads(threads: int | None, comm: Any, device: str = "cpu") -> int:
    """Set numba's thread count; by default the cores divided among this node's ranks (``comm`` an mpi4py
    communicator or ``None``). Returns the threads the run reports: on a GPU (``device``) 1, though the
    host's work (the tape's fills and copies) runs on the threads set too."""
    import numba

    available = int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
    if threads is None:
        local = 1
        if comm is not None and comm.Get_size() > 1:
            from mpi4py import MPI

            local = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_size()
        threads = max(1, available // local)
    if threads > available:
        raise InputError(f"--threads: {threads} is more than the {available} available")
    numba.set_num_threads(threads)
    return threads if device == "cpu" else 1


def exit_status(main: Callable[[], int]) -> int:
    """``main()``; an unexpected error on one rank of several prints its traceback and aborts every rank
    (``MPI_Abort``), as ``python -m mpi4py`` does: the other ranks would wait for it in their next
    collective forever."""
    try:
        return main()
    except Exception as error:
        mpi = sys.modules.get("mpi4py.MPI")
        if mpi is not None and mpi.COMM_WORLD.Get_size() > 1:
            # One write, the error's own line first: a launcher forwards a rank's output in the pieces it was
            # written in, and the abort can cut off what it has not forwarded yet.
            rank = mpi.COMM_WORLD.Get_rank()
            sys.stderr.write(f"rank {rank}: {type(error).__name__}: {error}\n{traceback.format_exc()}")
            sys.stderr.flush()
            # The launcher reads the pipe on its own time and stops reading when the abort reaches it: on a
            # busy machine the whole message was lost. A moment first lets it forward what was written.
            time.sleep(ABORT_GRACE)
            mpi.COMM_WORLD.Abort(1)
        raise


LAUNCHED_SIZES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS")
"""Where launchers say how many processes they started, the first one set counting: MPICH's Hydra and Slurm's
PMI-2 (``PMI_SIZE``), Open MPI's mpirun (``OMPI_COMM_WORLD_SIZE``), srun (``SLURM_STEP_NUM_TASKS``, last: a
multi-node Hydra starts its proxies with srun)."""

LAUNCHED_RANKS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")


def launched_size() -> tuple[str, int] | None:
    """The launcher's count of the processes it started, and the variable that says so (None: no launcher)."""
    for name in LAUNCHED_SIZES:
        value = os.environ.get(name, "")
        if value.isdigit():
            return name, int(value)
    return None


def mpi_library(mpi: Any) -> str:
    """The first line of the MPI library's version (``mpi``: ``mpi4py.MPI``), e.g. ``MPICH Version: 5.0.2``."""
    return " ".join(str(mpi.Get_library_version()).strip().splitlines()[0].split())


# mpi4py warns of such a launch on import, on every process; check_launched says it in one line instead.
warnings.filterwarnings("ignore", message="suspicious MPI execution environment")


def check_launched(mpi: Any) -> None:
    """Refuse a run whose launcher started several processes that mpi4py's MPI does not join into one job
    (Open MPI's mpirun for an MPICH build, srun --mpi=none: N copies of a one-rank run, each doing it all)."""
    launched = launched_size()
    if launched is not None and launched[1] > 1 and mpi.COMM_WORLD.Get_size() != launched[1]:
        name, started = launched
        raise InputError(
            f"the launcher started {started} processes ({name}={started}) but mpi4py's MPI "
            f"({mpi_library(mpi)}) sees {mpi.COMM_WORLD.Get_size()} rank(s) in each: use the launcher of "
            "the MPI that mpi4py was built against (the venv's mpiexec or srun --mpi=pmi2 for the mpich wheel)"
        )


def first_rank() -> bool:
    """Whether this process is the one that reports a run's errors: rank 0, as MPI and its launcher number
    the processes (a launcher that does not match mpi4py's MPI starts several, each rank 0 of its own)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and mpi.COMM_WORLD.Get_rank() != 0:
        return False
    return all(os.environ.get(name, "0") in ("", "0") for name in LAUNCHED_RANKS)


GPU_WARM_S = 0.5  # seconds of work before a GPU run is timed


def warm_up(run: Callable[[int], float], seconds: float = GPU_WARM_S) -> None:
    """Call ``run(k)`` for k = 1, 2, 4, ... until ``seconds`` have passed; ``run`` returns the seconds it took,
    the same on every rank (the slowest rank's), so that every rank takes the same turns.

    A GPU raises its clocks only under load: without a warm-up, ratios of gradient to primal time vary
    (docs/benchmarks.md, "In the code").
    """
    spent, k = 0.0, 1
    while spent < seconds:
        spent += run(k)
        k *= 2


def write_json(path: str, record: dict[str, Any]) -> None:
    """Write a run's record to ``path``: one JSON object, indented, ending in a newline."""
    with open(path, "w") as fh:
        json.dump(record, fh, indent=2)
        fh.write("\n")


def progress(total: float, enabled: bool, label: str, unit: str = "it") -> Any:
    """A tqdm progress bar on a terminal; a no-op without tqdm, when disabled, or off a terminal."""
    try:
        from tqdm import tqdm
    except ImportError:
        enabled = False
    if not enabled:
        return NoBar()
    return tqdm(total=total, desc=label, unit=unit, disable=None, leave=False)


class NoBar:
    """The progress bar of a run that shows none."""

    def update(self, n: float = 1) -> None:
        """Nothing to show."""

    def set_postfix_str(self, text: str) -> None:
        """Nothing to show."""

    def close(self) -> None:
        """Nothing to close."""


CONTEXT_BYTES = 512 << 20
"""Device memory a rank's process holds besides its arrays (its CUDA context, the modules CuPy and numba
load): an allowance, added to each rank's estimate when ranks share a GPU."""


def gpu_for(local_rank: int, gpus: int) -> int:
    """The GPU (an index among the ``gpus`` visible ones) of node-local rank ``local_rank``: round-robin, the
    rule ``scripts/gpu_round_robin.sh`` applies too (it then leaves each rank one visible GPU, index 0)."""
    return local_rank % max(1, gpus)


def local_rank(comm: Any) -> int:
    """This process's rank among the ranks of ``comm`` on its node (0 without MPI)."""
    if comm is None or comm.Get_size() == 1:
        return 0
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    rank = int(node.Get_rank())
    node.Free()
    return rank


@dataclasses.dataclass(frozen=True)
class DeviceNeed:
    """What one rank's run will allocate on its GPU (estimated from the problem's sizes), and of what."""

    nbytes: int
    what: str  # e.g. "LULESH -s 60 --mode grad"


def size_text(n: float) -> str:
    """A byte count for people: ``21.4 GB``, ``536.9 MB``, ``912 B``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


class Memory:
    """Where an app's arrays live: the host (NumPy), a GPU (CuPy), or, under ``NUMBA_ENABLE_CUDASIM=1``
    without CuPy, numba's simulated device arrays.

    A rank's GPU is ``gpu_for(node-local rank, visible GPUs)``: ranks share GPUs round-robin when there are
    more ranks than GPUs. Given ``needs``, the ranks check together, before anything is allocated, that the
    ranks sharing each GPU fit in its memory (``PAD_GPU_MEMORY``, bytes, stands for the size of every
    GPU), and all raise the same ``InputError`` if not.
    """

    def __init__(
        self, device: str, comm: Any = None, *, simulator: bool = True, needs: DeviceNeed | None = None
    ) -> None:
        """``simulator=False``: an app that needs CuPy arrays asks for them under the simulator too."""
        self.device = device
        self.module: Any = np
        self.gpu: int | None = None
        if device == "cpu":
            return
        from numba import config

        if simulator and config.ENABLE_CUDASIM:  # type: ignore[attr-defined]
            self.module, self.gpu = None, 0  # the simulator has one device
            if needs is not None:
                check_fits(comm, needs, (platform.node(), "simulated"), "the simulated GPU", None)
            return
        try:
            import cupy
        except ImportError as exc:
            raise InputError(f"--device gpu: CuPy is not available ({exc})") from None
        try:
            gpu = self.gpu = gpu_for(local_rank(comm), cupy.cuda.runtime.getDeviceCount())
            card = cupy.cuda.Device(gpu)
            card.use()
            from numba import cuda  # after pad's NumPy shim (pad.arrays), as every pad import

            cuda.select_device(gpu)  # numba's CUDA target on the same device
        except Exception as exc:  # no driver or device, or a CuPy or numba-cuda that cannot use it
            cause = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise InputError(f"--device gpu: no usable GPU ({type(exc).__name__}: {cause})") from None
        self.module = cupy
        if needs is not None:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
            name = visible[gpu].strip() if gpu < len(visible) and visible[gpu].strip() else str(gpu)
            bus = card.pci_bus_id
            check_fits(comm, needs, (platform.node(), bus), f"GPU {name} ({bus})", card.mem_info[1])

    def held_bytes(self) -> int | None:
        """Device bytes this process's CuPy memory pool holds (in use or cached), or None off CuPy."""
        if self.module is None or self.module is np:
            return None
        return int(self.module.get_default_memory_pool().total_bytes())

    def put(self, a: np.ndarray) -> Any:
        """``a`` in this memory."""
        if self.module is None:
            from numba import cuda  # after pad's NumPy shim (pad.arrays), as every pad import

            return cuda.to_device(np.ascontiguousarray(a))
        return self.module.asarray(a)

    def get(self, a: Any) -> np.ndarray:
        """``a`` on the host."""
        if isinstance(a, np.ndarray):
            return a
        return a.get() if hasattr(a, "get") else a.copy_to_host()

    def sync(self) -> None:
        """Wait for the device's work (for timings)."""
        if self.module is not None and self.module is not np:
            self.module.cuda.get_current_stream().synchronize()

    def fetch(self, *parts: Any) -> Fetch:
        """Host copies of ``parts`` (a few small arrays of this memory), started and waited for apart."""
        return Fetch(self, parts)


def check_fits(comm: Any, needs: DeviceNeed, key: tuple[str, str], name: str, capacity: int | None) -> None:
    """Raise the same ``InputError`` on every rank of ``comm`` if the ranks sharing some GPU need more than its
    memory: ``key`` (host, PCI bus) identifies this rank's GPU, ``name`` names it, ``capacity`` is its size
    in bytes (``PAD_GPU_MEMORY`` overrides it; None: unknown, nothing to check)."""
    override = os.environ.get("PAD_GPU_MEMORY")
    if override is not None:
        try:
            capacity = int(override)
        except ValueError:
            raise InputError(f"PAD_GPU_MEMORY: {override!r} is not a number of bytes") from None
    mine = (key, name, capacity, needs.nbytes + CONTEXT_BYTES, needs.what)
    every = comm.allgather(mine) if comm is not None and comm.Get_size() > 1 else [mine]
    sharing: dict[tuple[str, str], list[int]] = {}
    for rank, (where, *_) in enumerate(every):
        sharing.setdefault(where, []).append(rank)
    for ranks in sharing.values():
        size, held = every[ranks[0]][2], 0
        for rank in ranks:
            _, gpu, _, nbytes, what = every[rank]
            held += nbytes
            if size is not None and held > size:
                total = sum(every[r][3] for r in ranks)
                raise InputError(
                    f"--device gpu: rank {rank} does not fit on {gpu}: rank(s) {', '.join(map(str, ranks))} "
                    f"share it and need {size_text(total)} in all, over its {size_text(size)}; rank {rank} "
                    f"needs {size_text(nbytes)} ({what}: {size_text(nbytes - CONTEXT_BYTES)}, and "
                    f"{size_text(CONTEXT_BYTES)} for its CUDA context). Run fewer ranks per GPU or a smaller "
                    "problem"
                )


class Fetch:
    """Host copies of a few small arrays, taken in turns numbered 0, 1, 2, ...: ``start(k)`` starts turn k's
    copies, ``wait(k)`` returns them. On a GPU, turn k's copies go into pinned host buffers on a stream of
    their own, after the work queued so far and beside the work queued after it, so that neither the host
    nor that work waits for them (a copy in the compute stream held its kernels back by about 12 µs); the
    work queued between ``start(k)`` and ``wait(k)`` must not write the arrays. Two turns may be in
    flight. Elsewhere the copies are taken at ``start``."""

    SLOTS = 2

    def __init__(self, memory: Memory, parts: tuple[Any, ...]) -> None:
        self.memory, self.parts = memory, parts
        self.cupy = memory.module not in (None, np)
        self.taken: list[Any] = [None] * self.SLOTS
        if self.cupy:
            import cupyx

            self.pinned = [[cupyx.empty_pinned(p.shape, p.dtype) for p in parts] for _ in range(self.SLOTS)]
            self.stream = memory.module.cuda.Stream(non_blocking=True)

    def start(self, k: int) -> None:
        slot = k % self.SLOTS
        if not self.cupy:
            self.taken[slot] = [np.array(self.memory.get(p)) for p in self.parts]
            return
        self.stream.wait_event(self.memory.module.cuda.get_current_stream().record())
        for part, host in zip(self.parts, self.pinned[slot], strict=True):
            part.get(stream=self.stream, out=host, blocking=False)
        self.taken[slot] = self.stream.record()

    def wait(self, k: int) -> list[np.ndarray]:
        slot = k % self.SLOTS
        if not self.cupy:
            values: list[np.ndarray] = self.taken[slot]
            return values
        self.taken[slot].synchronize()
        return [host.copy() for host in self.pinned[slot]]


def command_output(cmd: list[str]) -> str | None:
    """Standard output of ``cmd`` (run in the checkout), or None if it cannot run or fails."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd=REPO)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def gpu_names() -> list[str]:
    """The GPUs this process may use (nvidia-smi's, limited to CUDA_VISIBLE_DEVICES where it is set)."""
    text = command_output(["nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader"])
    gpus = [line.split(",", 1) for line in (text or "").splitlines() if "," in line]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        wanted = [v.strip() for v in visible.split(",") if v.strip()]
        gpus = [g for g in gpus if g[0].strip() in wanted]
    return [name.strip() for _, name in gpus]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(module: str) -> str | None:
    """``module.__version__``, or None where it is missing or cannot be imported (a broken CUDA install)."""
    try:
        return str(importlib.import_module(module).__version__)
    except (ImportError, AttributeError, OSError, RuntimeError):
        return None


def launcher_version(mpiexec: list[str]) -> str | None:
    """The launcher's version line (Hydra's "Version:" line, else the first line), or None if it is missing."""
    lines = [
        line.strip() for line in (command_output([*mpiexec, "--version"]) or "").splitlines() if line.strip()
    ]
    hydra = ["Hydra " + " ".join(line.split()) for line in lines if line.startswith("Version:")]
    return (hydra + lines)[0] if lines else None


def _pad_commit() -> str | None:
    """The checkout's commit (with "-dirty" if it has changes), else $PAD_COMMIT, else None."""
    head = command_output(["git", "rev-parse", "HEAD"])
    if head is None:
        return os.environ.get("PAD_COMMIT")
    dirty = command_output(["git", "status", "--porcelain", "--untracked-files=no"])
    return head.strip() + ("-dirty" if dirty else "")


def utc_now() -> str:
    """The UTC date and time to the second, ISO 8601."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def machine(mpiexec: list[str] | None = None) -> dict[str, Any]:
    """Where a run happens: host, CPU, cores, GPUs, library versions, the MPI launcher (``mpiexec``, if the
    run uses one), pad's commit, the Slurm job, the date."""
    return {
        "hostname": platform.node(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "gpus": gpu_names(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "versions": {m: _version(m) for m in ("numpy", "numba", "numba_cuda", "mpi4py", "cupy", "tqdm")},
        "launcher": shlex.join(mpiexec) if mpiexec else None,
        "launcher_version": launcher_version(mpiexec) if mpiexec else None,
        "pad_commit": _pad_commit(),
        "slurm_job": os.environ.get("SLURM_JOB_ID"),
        "date": utc_now(),
    }
