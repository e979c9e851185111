"""The record ``pad.graph`` makes of a step: the device work of its pad operations, to redo without its Python.

Each operation that changes arrays adds a function that redoes it (a launch, a copy, a fill) while a record
is current; an operation whose effect a replay could not redo (one that reads the device on the host,
communicates over several ranks, spawns tasks) refuses the record instead. Inside ``pad.autodiff`` the tape
adds its own device work too (zero shadows, copies of kept values), so a differentiated step's record holds
its forward launches, its adjoints and everything between them, and the arrays they use.

On a GPU the record is captured once as a CUDA graph (CuPy's stream capture); memory allocated while it is
captured (the adjoints' tapes) belongs to the record from then on, since the graph's kernels keep its
addresses.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["Recording", "quiet_span", "recording"]

_current: contextvars.ContextVar[Recording | None] = contextvars.ContextVar("pad_replay", default=None)
_span: contextvars.ContextVar[object | None] = contextvars.ContextVar("pad_replay_span", default=None)


def recording() -> Recording | None:
    """The record a ``pad.graph`` step is making in this context, if any (pad's operations add to it)."""
    return _current.get()


def quiet_span() -> object | None:
    """A token that stays the same while a replay runs quiet entries only (``Recording.add``), None outside
    replays: within one span no integer array changed but by the operations that report it themselves, so
    what was found of integer arrays' contents there (a CPU plan's index arrays validated) still holds."""
    return _span.get()


class Recording:
    """The device work of one call of a step, each piece as a function that redoes it."""

    def __init__(self) -> None:
        self.entries: list[Callable[[], Any]] = []
        self.quiet: list[bool] = []  # per entry, ``add``'s ``quiet``
        self.why: str | None = None  # why the step cannot be replayed, once something made it so
        self.cupy = True  # every entry is CuPy device work, so the record can become a CUDA graph
        self.cuda_graph: Any = None
        self.keep: list[Any] = []  # what the entries use that nothing else holds: arguments, captured memory

    def add(self, entry: Callable[[], Any], *, cupy: bool, quiet: bool = False) -> None:
        """Add an operation; ``cupy``: it only enqueues work on CuPy's current stream (a launch, a copy);
        ``quiet``: it changes no integer array unless it reports so itself (a CPU launch tells the plans which
        arrays it stored into; a copy or fill of floating-point arrays changes none), see ``quiet_span``."""
        self.entries.append(entry)
        self.quiet.append(quiet)
        self.cupy = self.cupy and cupy

    def refuse(self, why: str) -> None:
        """Mark the step as one that cannot be replayed (the first reason is kept)."""
        if self.why is None:
            self.why = why

    @contextlib.contextmanager
    def making(self) -> Iterator[None]:
        """Make pad's operations in the block add to this record."""
        token = _current.set(self)
        try:
            yield
        finally:
            _current.reset(token)

    def replay(self) -> None:
        if self.cuda_graph is None and self.cupy and self.entries:
            self.cuda_graph = self._capture()
        if self.cuda_graph is not None:
            self.cuda_graph.launch()
            return
        token = _span.set(object())
        try:
            for entry, quiet in zip(self.entries, self.quiet, strict=True):
                if not quiet:
                    _span.set(object())
                entry()
        finally:
            _span.reset(token)

    def _capture(self) -> Any:
        """The entries, captured from a stream of their own into a CUDA graph."""
        import cupy

        pool = cupy.get_default_memory_pool()

        def allocate(nbytes: int) -> Any:
            memory = pool.malloc(nbytes)
            self.keep.append(memory)  # the graph's kernels use it at every launch
            return memory

        stream = cupy.cuda.Stream(non_blocking=True)
        with stream, cupy.cuda.using_allocator(allocate):
            stream.begin_capture()
            try:
                for entry in self.entries:
                    entry()
            except Exception as e:
                stream.end_capture()
                raise RuntimeError(
                    f"pad.graph: capturing the step's launches as a CUDA graph failed ({type(e).__name__}: {e})"
                ) from e
            return stream.end_capture()
