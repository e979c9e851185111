"""The arrays a loop works on: found in its arguments (and its step), named by their paths."""

from __future__ import annotations

import contextlib
import itertools
import types
from collections.abc import Callable, Iterator
from typing import Any

BREADTH = 1000


def arrays_in(obj: Any, path: str, depth: int = 0) -> Iterator[tuple[str, Any]]:
    """The arrays in ``obj`` (nested lists, tuples, dicts and plain objects: 3 levels, 1000 items each)."""
    if hasattr(obj, "dtype") and isinstance(getattr(obj, "shape", None), tuple) and not callable(obj):
        yield path, obj
    elif depth >= 3 or isinstance(obj, (str, bytes, type, types.ModuleType)) or callable(obj):
        return
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj[:BREADTH]):
            yield from arrays_in(v, f"{path}[{i}]", depth + 1)
    elif isinstance(obj, dict):
        for k, v in itertools.islice(obj.items(), BREADTH):
            yield from arrays_in(v, f"{path}[{k!r}]", depth + 1)
    elif hasattr(obj, "__dict__"):
        for k, v in itertools.islice(vars(obj).items(), BREADTH):
            yield from arrays_in(v, f"{path}.{k}", depth + 1)


def reachable(fn: Callable[..., Any], name: str = "") -> list[tuple[str, Any]]:
    """The arrays a function can reach besides its arguments: closure cells, the globals it names, its
    defaults, its object (a bound method's); paths start with ``name.`` if given."""

    def at(var: str) -> str:
        return f"{name}.{var}" if name else var

    seen: list[tuple[str, Any]] = []
    code = getattr(fn, "__code__", None)
    if code is not None:
        cells = zip(code.co_freevars, getattr(fn, "__closure__", None) or (), strict=False)
        for var, cell in cells:
            with contextlib.suppress(ValueError):  # an empty cell
                seen += arrays_in(cell.cell_contents, at(var))
        scope = getattr(fn, "__globals__", {})
        for var in code.co_names:
            if var in scope:
                seen += arrays_in(scope[var], at(var))
        seen += arrays_in(getattr(fn, "__defaults__", None) or (), at("defaults"))
    if hasattr(fn, "__self__"):
        seen += arrays_in(fn.__self__, at("self"))
    return seen


class Layout:
    """The identity and shape of every array among a loop's arguments, checked after each step, but for
    ``scratch`` ones (message buffers an object among them keeps for its next use: a ``pad.mpi.Halo``'s),
    which a step may mark as such only as it runs."""

    def __init__(self, args: tuple, scratch: Callable[[Any], bool]) -> None:
        self._args, self._scratch = args, scratch
        self._seen = self._now()

    def _now(self) -> list[tuple[str, Any, tuple]]:
        return [(p, a, tuple(a.shape)) for p, a in arrays_in(self._args, "args")]

    def _state(self, found: list[tuple[str, Any, tuple]]) -> list[tuple[str, int, tuple]]:
        return [(p, id(a), shape) for p, a, shape in found if not self._scratch(a)]

    def check(self, t: int) -> None:
        now, seen = self._state(self._now()), self._state(self._seen)
        if now == seen:
            return
        for (path, ident, shape), (_, ident2, shape2) in zip(seen, now, strict=False):
            if shape != shape2:
                raise ValueError(
                    f"pad.checkpoint: step {t} changed the shape of {path} from {shape} to {shape2}; "
                    "a checkpointed step must keep the shapes of its arrays"
                )
            if ident != ident2:
                raise ValueError(
                    f"pad.checkpoint: step {t} replaced {path} by a new array; a checkpointed step must "
                    "update its arrays in place"
                )
        raise ValueError(f"pad.checkpoint: step {t} changed the arrays among its arguments")
