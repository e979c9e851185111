"""Differentiable whole-array operations, for the NumPy copy-backs programs write between launches.

``pad.copy(dst, src)`` is ``dst[...] = src``, ``pad.scale(x, a)`` is ``x *= a``, ``pad.axpy(a, x, y)`` is
``y += a * x`` and ``pad.fill(x, value)`` is ``x[...] = value``. Each is a kernel launch, so it runs on CPU
threads or on the GPU where its arrays live, and is differentiated like any launch (in ``a`` too, when ``a``
is a ``pad.Active`` scalar). Arrays are whole arrays or views of one shape (no broadcasting); views of three or
more dimensions must be C-contiguous.
"""

from __future__ import annotations

from typing import Any

from pad import arrays
from pad.kernel import kernel
from pad.parallel import launch

__all__ = ["axpy", "copy", "fill", "scale"]


@kernel
def _copy(i, dst, src):
    dst[i] = src[i]


@kernel
def _copy2(i, dst, src):
    r = i // dst.shape[1]
    c = i % dst.shape[1]
    dst[r, c] = src[r, c]


@kernel
def _scale(i, x, a):
    x[i] = a * x[i]


@kernel
def _scale2(i, x, a):
    r = i // x.shape[1]
    c = i % x.shape[1]
    x[r, c] = a * x[r, c]


@kernel
def _axpy(i, a, x, y):
    y[i] += a * x[i]


@kernel
def _axpy2(i, a, x, y):
    r = i // y.shape[1]
    c = i % y.shape[1]
    y[r, c] += a * x[r, c]


@kernel
def _fill(i, x, value):
    x[i] = value


@kernel
def _fill2(i, x, value):
    r = i // x.shape[1]
    c = i % x.shape[1]
    x[r, c] = value


def _views(what: str, *operands: Any) -> tuple[list[Any], bool]:
    """The operands as arrays of one or two dimensions (C-contiguous ones flattened, as views), and
    whether they are two-dimensional."""
    shape = operands[0].shape
    for a in operands[1:]:
        if a.shape != shape:
            raise ValueError(f"pad.{what}: the arrays' shapes {shape} and {a.shape} differ (no broadcasting)")
    if all(arrays.c_contiguous(a) for a in operands):
        return [a.reshape(a.size) for a in operands], False
    if len(shape) > 2:
        raise TypeError(f"pad.{what}: views of {len(shape)} dimensions must be C-contiguous; copy them first")
    return list(operands), len(shape) == 2


def copy(dst: Any, src: Any) -> None:
    """``dst[...] = src``, differentiated: ``dst``'s adjoint goes to ``src``."""
    (d, s), two = _views("copy", dst, src)
    launch(_copy2 if two else _copy, dst.size, d, s)


def scale(x: Any, a: float) -> None:
    """``x *= a``, differentiated in ``x`` and in ``a``."""
    (v,), two = _views("scale", x)
    launch(_scale2 if two else _scale, x.size, v, a)


def axpy(a: float, x: Any, y: Any) -> None:
    """``y += a * x``, differentiated in ``a``, ``x`` and ``y``."""
    (u, v), two = _views("axpy", x, y)
    launch(_axpy2 if two else _axpy, y.size, a, u, v)


def fill(x: Any, value: float) -> None:
    """``x[...] = value``: ``x``'s adjoint is cleared (and goes to ``value`` if it is active)."""
    (v,), two = _views("fill", x)
    launch(_fill2 if two else _fill, x.size, v, value)
