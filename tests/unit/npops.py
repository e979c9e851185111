"""Small differentiable NumPy operations for the tasks and checkpoint tests, recorded through the tape."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from pad import tape


class _SinRecord:
    def __init__(self, x: Any, dx: Any, dy: Any, pause: float, barrier: threading.Barrier | None) -> None:
        self.x, self.dx, self.dy, self.pause, self.barrier = x, dx, dy, pause, barrier

    def reverse(self) -> None:
        if self.barrier is not None:  # proves that two adjoints run at the same time
            self.barrier.wait(timeout=10)
        g = np.cos(self.x.value) * self.dy
        self.dy[...] = 0.0
        if self.dx is not None:
            old = self.dx.copy()  # a deliberately slow, racy read-modify-write of the shadow
            time.sleep(self.pause)
            self.dx[...] = old + g


def sin_to(
    x: np.ndarray, y: np.ndarray, pause: float = 0.0, barrier: threading.Barrier | None = None
) -> None:
    """``y[:] = sin(x)``; its adjoint ``dx += cos(x) dy; dy = 0`` (``pause`` widens any race window)."""
    ctx = tape.current()
    if ctx is None:
        y[...] = np.sin(x)
        return
    dx, dy = ctx.shadow(x), ctx.shadow(y)
    y = ctx.writable(y)  # an array under differentiation is read-only to the program; ops write an alias
    if not ctx.reverse_mode:
        ty = np.cos(x) * dx if dx is not None else 0.0
        ctx.will_write([y])
        y[...] = np.sin(x)
        if dy is not None:
            dy[...] = ty
        return
    kept = ctx.keep(x)
    ctx.will_write([y])
    y[...] = np.sin(x)
    if dy is not None:
        ctx.record(_SinRecord(kept, dx, dy, pause, barrier))


class _AxpyRecord:
    def __init__(self, a: float, dx: Any, dy: Any) -> None:
        self.a, self.dx, self.dy = a, dx, dy

    def reverse(self) -> None:
        if self.dx is not None:
            self.dx += self.a * self.dy


def axpy(a: float, x: np.ndarray, y: np.ndarray) -> None:
    """``y += a x``; its adjoint ``dx += a dy``."""
    ctx = tape.current()
    dx, dy = (ctx.shadow(x), ctx.shadow(y)) if ctx is not None else (None, None)
    if ctx is not None:
        ctx.will_write([y])
        y = ctx.writable(y)
    y += a * x
    if ctx is None or dy is None:
        return
    if ctx.reverse_mode:
        ctx.record(_AxpyRecord(a, dx, dy))
    elif dx is not None:
        dy += a * dx
