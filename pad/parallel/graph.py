"""``pad.graph``: record the launches of a step once, then replay them without running its Python.

A time loop calls the same step with the same arrays thousands of times; each call spends tens of
microseconds of Python per launch, which on a GPU is more than a small kernel takes. ``pad.graph(step)``
runs ``step`` normally on its first call for given arguments and records the pad operations it makes
(launches, and collectives of single-rank communicators, which are copies); later calls with the same
arguments replay the record. On a GPU the record is captured once as a CUDA graph (CuPy's stream capture)
and each replay is one graph launch, so the host's cost of a step no longer grows with its launches.

Arguments are compared by identity for arrays (and their shape, strides and dtype) and by value for
scalars; tuples, lists, dicts and dataclasses of them are looked into. A call whose arguments differ from
every record's is recorded anew (a few records are kept). What a replay skips is everything in the step
that is not a pad operation: Python side effects, NumPy or CuPy work, reads of array values. As with a
jitted function, the step must depend on nothing but its arguments. A step that cannot be replayed
(communication over several ranks, tasks, or an ``autodiff`` inside it) runs as it is on every call;
``Graph.why`` says why. Inside ``autodiff``/``fwddiff`` a graph runs its step, whose launches the tape records.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from pad import arrays, tape

__all__ = ["Graph", "Recording", "graph", "recording"]

RECORDS = 8  # argument sets a graph keeps a record for

_current: contextvars.ContextVar[Recording | None] = contextvars.ContextVar("pad_graph", default=None)


def recording() -> Recording | None:
    """The record a ``pad.graph`` step is making in this context, if any (pad's operations add to it)."""
    return _current.get()


class Recording:
    """The pad operations of one call of a step, each as a function that redoes it."""

    def __init__(self) -> None:
        self.entries: list[Callable[[], Any]] = []
        self.why: str | None = None  # why the step cannot be replayed, once something made it so
        self.cupy = True  # every entry is CuPy device work, so the record can become a CUDA graph
        self.cuda_graph: Any = None
        self.keep: Any = None  # the arguments: alive as long as the record, so their ids stay theirs

    def add(self, entry: Callable[[], Any], *, cupy: bool) -> None:
        """Add an operation; ``cupy``: it only enqueues work on CuPy's current stream (a launch, a copy)."""
        self.entries.append(entry)
        self.cupy = self.cupy and cupy

    def refuse(self, why: str) -> None:
        """Mark the step as one that cannot be replayed (the first reason is kept)."""
        if self.why is None:
            self.why = why

    def replay(self) -> None:
        if self.cuda_graph is None and self.cupy and self.entries:
            self.cuda_graph = _capture(self.entries)
        if self.cuda_graph is not None:
            self.cuda_graph.launch()
            return
        for entry in self.entries:
            entry()


def _capture(entries: list[Callable[[], Any]]) -> Any:
    """The entries, captured from a stream of their own into a CUDA graph."""
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        try:
            for entry in entries:
                entry()
        except Exception as e:
            stream.end_capture()
            raise RuntimeError(
                f"pad.graph: capturing the step's launches as a CUDA graph failed ({type(e).__name__}: {e})"
            ) from e
        return stream.end_capture()


class Graph:
    """A step whose pad operations are recorded on its first call and replayed on later ones."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.why: str | None = None  # why the last call could not be replayed (None: it could)
        self._records: OrderedDict[tuple, Recording] = OrderedDict()
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any) -> None:
        if tape.current() is not None:
            self.fn(*args)
            return
        parts: list[Any] = []
        key = tuple(_key(a, parts) for a in args)
        record = self._records.get(key)
        if record is not None:
            self._records.move_to_end(key)
            record.replay()
            return
        record = Recording()
        token = _current.set(record)
        try:
            self.fn(*args)
        finally:
            _current.reset(token)
        self.why = record.why
        if record.why is None:
            record.keep = parts
            self._records[key] = record
            if len(self._records) > RECORDS:
                self._records.popitem(last=False)

    def clear(self) -> None:
        """Forget every record (the next call of each argument set records anew)."""
        self._records.clear()

    def __repr__(self) -> str:
        return f"<pad.graph of {getattr(self.fn, '__qualname__', self.fn)!r}, {len(self._records)} records>"


_SCALARS = (bool, int, float, complex, str, bytes, type(None))


def _key(a: Any, parts: list[Any]) -> Any:
    """What identifies argument ``a`` for a replay (arrays are kept alive in ``parts``)."""
    if isinstance(a, _SCALARS):
        return (type(a), a)
    if hasattr(a, "shape") and hasattr(a, "dtype"):
        if not getattr(a, "ndim", 0):  # a NumPy scalar: by value
            return (type(a), a.item() if hasattr(a, "item") else a)
        parts.append(a)
        return (id(a), a.shape, a.strides, a.dtype.str, arrays.is_device(a))
    if isinstance(a, (tuple, list)):
        return (type(a), tuple(_key(x, parts) for x in a))
    if isinstance(a, dict):
        return (dict, tuple((k, _key(v, parts)) for k, v in a.items()))
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        parts.append(a)
        return (id(a), tuple(_key(getattr(a, f.name), parts) for f in dataclasses.fields(a)))
    raise TypeError(
        f"pad.graph: cannot tell one {type(a).__name__} argument from another; pass arrays, scalars, or "
        "tuples, lists, dicts or dataclasses of them (reach other objects through the step's closure)"
    )


def graph(fn: Callable[..., Any]) -> Graph:
    """``fn`` as a step whose launches are recorded once and replayed (see the module's docstring)."""
    return Graph(fn)
