"""What the apps' command lines share: argument checks, threads per rank, a progress bar."""

from __future__ import annotations

import argparse
import os
from typing import Any, NoReturn

import numpy as np

EXIT_BAD_INPUT = 2


class InputError(ValueError):
    """Bad input (a flag, a file): one line naming it, exit status 2, before any work."""


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that raises ``InputError`` instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise InputError(message)


def integer(low: int) -> Any:
    """An argparse type: an integer of at least ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} must be at least {low}")
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


def set_threads(threads: int | None, comm: Any) -> int:
    """Set numba's thread count; by default the cores divided among this node's ranks (``comm`` an mpi4py
    communicator or ``None``)."""
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
    return threads


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


class Memory:
    """Where an app's arrays live: the host (NumPy), a GPU (CuPy, one device per rank of a node), or,
    under ``NUMBA_ENABLE_CUDASIM=1`` without CuPy, numba's simulated device arrays."""

    def __init__(self, device: str, comm: Any = None) -> None:
        self.device = device
        self.module: Any = np
        if device == "cpu":
            return
        from numba import config

        if config.ENABLE_CUDASIM:  # type: ignore[attr-defined]
            self.module = None
            return
        try:
            import cupy
        except ImportError as exc:
            raise InputError(f"--device gpu: CuPy is not available ({exc})") from None
        local = 0
        if comm is not None and comm.Get_size() > 1:
            from mpi4py import MPI

            local = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
        gpu = local % max(1, cupy.cuda.runtime.getDeviceCount())
        cupy.cuda.Device(gpu).use()
        from pad.kernel.cuda_runtime import cuda

        cuda.select_device(gpu)  # numba's CUDA target on the same device
        self.module = cupy

    def put(self, a: np.ndarray) -> Any:
        """``a`` in this memory."""
        if self.module is None:
            from pad.kernel.cuda_runtime import cuda  # numba.cuda, imported after pad's NumPy 2.5 shim

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
