"""Source-to-source AD of kernels: ``@pad.kernel``, ``@pad.func``, ``pad.local_array``, ``pad.show``.

Source in, generated source out: this package parses a kernel, lowers it to a small IR, transforms it
(tangent, or forward sweep + adjoint sweep) and prints numba launchers. It knows nothing of tapes or MPI.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from pad.annotations import Active, Const, Dup
from pad.kernel import checks
from pad.kernel.checks import debug
from pad.kernel.compiler import MODES, Variant, build
from pad.kernel.frontend import Source, Tables, kind_of_value
from pad.kernel.ir import KernelSyntaxError

__all__ = ["Func", "Kernel", "KernelSyntaxError", "Variant", "debug", "func", "kernel", "local_array", "show"]


class Kernel:
    """A kernel: ``fn(i, *args)`` run for every launch index ``i`` by ``pad.launch``."""

    def __init__(self, fn: Callable[..., Any], fastmath: bool = False) -> None:
        self.fn = fn
        self.fastmath = fastmath
        self._variants: dict[tuple, Variant] = {}
        self._tables = Tables()  # the module-level arrays it reads, as its first variant found them
        self._lock = threading.Lock()
        Source.of(fn)  # fail early if the source cannot be read
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any) -> Any:
        raise TypeError(
            f"kernel {self.fn.__name__} cannot be called directly; launch it: pad.launch({self.fn.__name__}, n, *args)"
        )

    def variant(
        self,
        args: tuple,
        mode: str,
        active: tuple[bool, ...] | None = None,
        target: str = "cpu",
        signature: tuple | None = None,
    ) -> Variant:
        """The compiled variant for these arguments and target (cached per kinds, activity and target;
        ``signature``: the arguments' ``Kernel.signature``, where the caller has it already)."""
        active = active if active is not None else (False,) * len(args)
        checked = checks.enabled() and (target == "cpu" or _simulated())
        if checks.enabled() and not checked:
            checks.gpu_unchecked()
        key = (mode, signature if signature is not None else self.signature(args), active, target, checked)
        hit = self._variants.get(key)
        if hit is None:
            kinds = [
                kind_of_value(a, f"argument {k + 1} of kernel {self.fn.__name__}") for k, a in enumerate(args)
            ]
            with self._lock:
                hit = self._variants.get(key)
                if hit is None:
                    hit = self._variants[key] = build(
                        self.fn, kinds, active, mode, self.fastmath, target, checked, self._tables
                    )
        return hit

    @staticmethod
    def signature(args: tuple) -> tuple:
        """What the variant for ``args`` depends on besides mode, activity and target (cheap to compute)."""
        return tuple(map(_signature, args))

    def __repr__(self) -> str:
        return f"<pad.kernel {self.fn.__module__}.{self.fn.__qualname__}>"


def _simulated() -> bool:
    """Whether CUDA kernels run on numba's simulator (where PAD_DEBUG checks them)."""
    from numba import config

    return bool(config.ENABLE_CUDASIM)  # type: ignore[attr-defined]


def _signature(a: Any) -> Any:
    """What a launch argument's kernel kind depends on, cheaply (a launch looks its variant up by it)."""
    ndim = getattr(a, "ndim", None)
    if ndim:
        return (a.dtype.char, ndim)
    if type(a) is tuple:
        return tuple(map(type, a))
    return type(a)


class Func:
    """A helper that kernels call; it is inlined and differentiated through. Called from Python, it runs.

    ``cuda``: the body CUDA kernels inline instead, with the same parameters and results. For one value
    computed two ways where the targets' compilers favour different ones (a GPU thread's registers against
    a CPU core's caches); the two should compute the same values."""

    _pad_func = True

    def __init__(self, fn: Callable[..., Any], cuda: Callable[..., Any] | None = None) -> None:
        self.py_func = fn
        self.__name__ = fn.__name__
        Source.of(fn)
        functools.update_wrapper(self, fn)
        self.cuda: Func | None = None
        if cuda is not None:
            body = getattr(cuda, "py_func", cuda)
            if list(inspect.signature(body).parameters) != list(inspect.signature(fn).parameters):
                raise TypeError(
                    f"helper {fn.__name__}{inspect.signature(fn)}: its CUDA body {body.__name__}"
                    f"{inspect.signature(body)} must take the same parameters"
                )
            self.cuda = Func(body)

    def on(self, target: str) -> Func:
        """The helper whose body kernels for ``target`` inline."""
        return self.cuda if target == "cuda" and self.cuda is not None else self

    def __call__(self, *args: Any) -> Any:
        return self.py_func(*args)


def kernel(fn: Callable[..., Any] | None = None, *, fastmath: bool = False) -> Any:
    """Mark a kernel. ``@pad.kernel`` or ``@pad.kernel(fastmath=True)`` (lets numba reassociate sums)."""
    if fn is None:
        return lambda f: Kernel(f, fastmath=fastmath)
    return Kernel(fn, fastmath=fastmath)


def func(fn: Callable[..., Any] | None = None, *, cuda: Callable[..., Any] | None = None) -> Any:
    """Mark a helper callable from kernels and other helpers. ``@pad.func`` or ``@pad.func(cuda=other)``:
    CUDA kernels inline ``other``'s body instead (see :class:`Func`)."""
    if fn is None:
        return lambda f: Func(f, cuda=cuda)
    return Func(fn, cuda=cuda)


def local_array(shape: int | tuple[int, ...], dtype: Any = np.float64) -> np.ndarray:
    """A fixed-size per-iteration array inside a kernel (outside kernels: an uninitialized NumPy array)."""
    return np.empty(shape, dtype)


local_array._pad_local_array = True  # type: ignore[attr-defined]


def show(k: Kernel, mode: str = "adjoint", *args: Any, file: Any = None, target: str = "cpu") -> str:
    """The generated source of ``k`` for ``mode`` and example launch arguments; printed to ``file`` when one is
    given (``file=sys.stdout``).

    Arguments are given as to ``pad.launch`` (after ``n``), annotated with ``pad.Dup``/``pad.Active`` to
    say which are active: ``print(pad.show(step, "adjoint", 2.0, pad.Dup(x, dx), pad.Dup(y, dy)))``.
    ``target="cuda"`` shows the CUDA kernel instead of the CPU launcher.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    values = tuple(a.value if isinstance(a, (Dup, Active, Const)) else a for a in args)
    active = tuple(isinstance(a, (Dup, Active)) for a in args)
    if target not in ("cpu", "cuda"):
        raise ValueError(f"target must be 'cpu' or 'cuda', not {target!r}")
    source = k.variant(values, mode, active if mode != "primal" else None, target).source
    if file is not None:
        print(source, file=file)
    return source
