"""Generated code does not depend on which ``id()`` Python hands out.

The passes key statements by ``id()``, which is unique only among live objects: CPython gives a statement
made after another died the dead one's memory, and so its id. A pass that keeps the id of a statement it
dropped then mistakes the new one for it (a CUDA adjoint's tape sized 0, seen once in CI). Here every
``pad.kernel`` module's ``id`` hands the next object of a type asked about the id of the last one of that
type that died, and every corpus kernel's variants must come out as they do with the real ``id``.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
import weakref
from typing import Any

import numpy as np
import pytest

import pad
from tests.unit.corpus import CASES
from tests.unit.test_saves import k_overwrite_in_outer_loop

KERNEL_MODULES = [
    importlib.import_module(f"pad.kernel.{m.name}")
    for m in pkgutil.iter_modules(importlib.import_module("pad.kernel").__path__)
]
Kernel = importlib.import_module("pad.kernel").Kernel
VARIANTS = [("adjoint", "cpu"), ("adjoint", "cuda"), ("tangent", "cpu"), ("fused", "cpu")]


class ReusedIds:
    """An ``id`` that reuses the ids of dead objects as eagerly as it can: per type, last died, first reused."""

    def __init__(self) -> None:
        self.live: dict[int, tuple[weakref.ref, int]] = {}  # the real id -> (the object, the id handed out)
        self.dead: dict[type, list[int]] = {}
        self.fresh = 1 << 62

    def __call__(self, x: object) -> int:
        known = self.live.get(id(x))
        if known is not None and known[0]() is x:
            return known[1]
        try:
            ref = weakref.ref(x, functools.partial(self._died, id(x), type(x)))
        except TypeError:  # no weak references (numbers, tuples): their real id
            return id(x)
        reused = self.dead.get(type(x))
        handed = reused.pop() if reused else self._next()
        self.live[id(x)] = (ref, handed)
        return handed

    def _next(self) -> int:
        self.fresh += 1
        return self.fresh

    def _died(self, key: int, kind: type, _: weakref.ref) -> None:
        self.dead.setdefault(kind, []).append(self.live.pop(key)[1])


def _launches() -> list[tuple[Any, tuple]]:
    """(kernel, arguments) of every launch the corpus programs make, without running a kernel."""
    seen: list[tuple[Any, tuple]] = []
    real = pad.launch
    pad.launch = lambda kernel, n, *args, **_: seen.append((kernel, args))  # type: ignore[assignment]
    try:
        for case in CASES:
            args = case.make_args(np.random.default_rng(0), case.dtype)
            case.program(*(a.value if isinstance(a, (pad.Dup, pad.Active)) else a for a in args))
    finally:
        pad.launch = real
    x = np.linspace(0.2, 1.1, 5)
    return [*seen, (k_overwrite_in_outer_loop, (x, np.zeros_like(x)))]


def _made(kernel: Any, args: tuple) -> list[str]:
    """Every variant of ``kernel`` for ``args`` (floating-point arrays active), shown without addresses."""
    fresh = Kernel(kernel.fn, kernel.fastmath)
    active = tuple(isinstance(a, np.ndarray) and a.dtype.kind == "f" for a in args)
    made = [fresh.variant(args, mode, active, target) for mode, target in VARIANTS]
    return [re.sub(r" at 0x[0-9a-f]+", "", repr(v)) for v in made]


def test_variants_do_not_depend_on_which_ids_python_hands_out(monkeypatch: pytest.MonkeyPatch) -> None:
    launches = {id(k.fn): (k, args) for k, args in _launches()}  # a kernel once, with its first arguments
    assert len(launches) >= 50
    expected = {key: _made(k, args) for key, (k, args) in launches.items()}
    reused = ReusedIds()
    for module in KERNEL_MODULES:
        monkeypatch.setattr(module, "id", reused, raising=False)
    for key, (k, args) in launches.items():
        assert _made(k, args) == expected[key], k.fn.__name__
