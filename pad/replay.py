"""The record ``pad.graph`` makes of a step: the work of its pad operations, to redo without its Python.

Each operation that changes arrays or communicates adds a function that redoes it (a launch, a copy, a fill,
an MPI call with its buffers, a wait for its requests) while a record is current; an operation whose effect a
replay could not redo (one that reads the device on the host, receives from whichever rank sends, spawns
tasks) refuses the record instead. Inside ``pad.autodiff`` the tape adds its own work too (zero shadows,
copies of kept values, the adjoints of messages and collectives as the reverse pass runs them), so a
differentiated step's record holds its forward launches, its adjoints and everything between them, and the
arrays they use.

On a GPU each run of consecutive CuPy entries (launches, device copies) is captured once as a CUDA graph
(CuPy's stream capture) and replayed as one graph launch; the entries between them, host and MPI work, run
in Python in their place, on the same stream. Memory allocated while a run is captured (the adjoints'
tapes) belongs to the record from then on, since the graph's kernels keep its addresses.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator
from typing import Any

from pad import arrays
from pad.kernel import checks

__all__ = ["Recording", "done", "left_as_filled", "quiet_span", "recording"]

HOST_PASSES: list[
    Callable[[list[Callable[[], Any]], list[bool]], tuple[list[Callable[[], Any]], list[bool]]]
] = []
"""Passes over each run of host entries (with their ``quiet`` flags) before its first replay: pad/parallel/driver.py
adds the one that runs consecutive CPU launches, copies and fills as one compiled program."""

_current: contextvars.ContextVar[Recording | None] = contextvars.ContextVar("pad_replay", default=None)
_span: contextvars.ContextVar[object | None] = contextvars.ContextVar("pad_replay_span", default=None)


def recording() -> Recording | None:
    """The record a ``pad.graph`` step is making in this context, if any (pad's operations add to it)."""
    return _current.get()


def done(work: Callable[..., None], *operands: Any) -> None:
    """Add ``work(*operands)``, device work just done (a copy or a fill into ``operands[0]``), to the record a
    ``pad.graph`` step is making, if any: a replay redoes it where the step's Python made it."""
    record = _current.get()
    if record is not None:
        record.add(
            functools.partial(work, *operands),
            cupy=all(map(arrays.is_cupy, operands)),
            quiet=operands[0].dtype.kind == "f",
        )


def left_as_filled(a: Any) -> None:
    """Tell the record a ``pad.graph`` step is making, if any, that the step leaves ``a`` as the fill just
    recorded into it made it (the zero shadow of an intermediate whose adjoint clears it whole): a replay
    after a finished run then needs no fill (``Recording.resets``)."""
    record = _current.get()
    if record is not None:
        record.reset(a)


def quiet_span() -> object | None:
    """A token that stays the same while a replay runs quiet entries only (``Recording.add``), None outside
    replays: within one span no integer array changed but by the operations that report it themselves, so
    what was found of integer arrays' contents there (a CPU plan's index arrays validated) still holds."""
    return _span.get()


class Recording:
    """The work of one call of a step, each piece as a function that redoes it. ``ranks``: how many ranks
    agree on each replay (a checkpointed loop's step: its communicator's; None for ``pad.graph``, whose steps
    every rank calls): an operation that communicates over more refuses the record (ranks running the step
    live would number their messages on while the others replayed theirs)."""

    def __init__(self, ranks: int | None = None) -> None:
        self.ranks = ranks
        self.entries: list[Callable[[], Any]] = []
        self.quiet: list[bool] = []  # per entry, ``add``'s ``quiet``
        self.device: list[bool] = []  # per entry, ``add``'s ``cupy``
        self.why: str | None = None  # why the step cannot be replayed, once something made it so
        self.keep: list[Any] = []  # what the entries use that nothing else holds: arguments, captured memory
        self.finish: list[Callable[[], None]] = []  # checks run when the step returns (``making``)
        self._runs: list[Run] | None = None
        self._covered = 0
        # Fills of arrays that every finished run of the step leaves as filled (``left_as_filled``): run
        # before a replay only where the last run, recorded or replayed, stopped part way (an exception)
        self.resets: list[functools.partial] = []
        self.finished = False

    def add(self, entry: Callable[[], Any], *, cupy: bool, quiet: bool = False) -> None:
        """Add an operation; ``cupy``: it only enqueues work on CuPy's current stream (a launch, a copy), so
        a CUDA graph can capture it; ``quiet``: it changes no integer array unless it reports so itself (a CPU
        launch tells the plans which arrays it stored into; a copy or fill of floating-point arrays changes
        none), see ``quiet_span``. Inside ``covering`` nothing is added."""
        if self._covered:
            return
        self.entries.append(entry)
        self.quiet.append(quiet)
        self.device.append(cupy)

    def reset(self, a: Any) -> None:
        """Move the latest fill of ``a`` from the entries to ``resets``."""
        for k in range(len(self.entries) - 1, -1, -1):
            entry = self.entries[k]
            if isinstance(entry, functools.partial) and entry.func is arrays.zero and entry.args[0] is a:
                self.resets.append(entry)
                del self.entries[k], self.quiet[k], self.device[k]
                return

    def refuse(self, why: str) -> None:
        """Mark the step as one that cannot be replayed (the first reason is kept)."""
        if self.why is None:
            self.why = why

    @contextlib.contextmanager
    def covering(self) -> Iterator[None]:
        """Run the block adding nothing: the entry just added redoes all of it (an adjoint that communicates,
        whose messages would otherwise add themselves too)."""
        self._covered += 1
        try:
            yield
        finally:
            self._covered -= 1

    @contextlib.contextmanager
    def making(self) -> Iterator[None]:
        """Make pad's operations in the block add to this record; then run the ``finish`` checks."""
        token = _current.set(self)
        try:
            yield
            for check in self.finish:
                check()
            self.finished = True
        finally:
            _current.reset(token)

    def replay(self) -> None:
        """Redo the entries in order: runs of CuPy entries as CUDA graphs, the others in Python."""
        if self._runs is None:
            self._runs = self._split()
        if not self.finished:
            for fill in self.resets:
                fill()
        elif checks.enabled():
            self._check_resets()
        self.finished = False
        token = _span.set(object())
        try:
            for run in self._runs:
                if run.device:
                    if run.graph is None:
                        run.graph = self._capture(run.entries)
                    run.graph.launch()
                    continue
                for entry, quiet in zip(run.entries, run.quiet, strict=True):
                    if not quiet:
                        _span.set(object())
                    entry()
            self.finished = True
        finally:
            _span.reset(token)

    def _check_resets(self) -> None:
        """PAD_DEBUG: the arrays of ``resets`` are as their fills leave them."""
        for fill in self.resets:
            if arrays.to_host(fill.args[0]).any():
                raise RuntimeError(
                    "pad.graph: an intermediate's shadow that the step's adjoint clears was not zero when a "
                    "replay began (a pad bug: please report it)"
                )

    def _split(self) -> list[Run]:
        """The entries in runs of consecutive ones alike: CuPy work (captured) or not (run in Python, as the
        ``HOST_PASSES`` leave them)."""
        runs: list[Run] = []
        for entry, quiet, device in zip(self.entries, self.quiet, self.device, strict=True):
            if not runs or runs[-1].device != device:
                runs.append(Run(device))
            runs[-1].entries.append(entry)
            runs[-1].quiet.append(quiet)
        for run in (r for r in runs if not r.device):
            for host_pass in HOST_PASSES:
                run.entries, run.quiet = host_pass(run.entries, run.quiet)
        return runs

    def _capture(self, entries: list[Callable[[], Any]]) -> Any:
        """The entries, captured from a stream of their own into a CUDA graph, to launch on the current one."""
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
                for entry in entries:
                    entry()
            except Exception as e:
                stream.end_capture()
                raise RuntimeError(
                    f"pad.graph: capturing the step's launches as a CUDA graph failed ({type(e).__name__}: {e})"
                ) from e
            return stream.end_capture()


class Run:
    """Consecutive entries of a record alike: CuPy work (``device``: one CUDA graph, once captured) or not."""

    __slots__ = ("device", "entries", "graph", "quiet")

    def __init__(self, device: bool) -> None:
        self.device = device
        self.entries: list[Callable[[], Any]] = []
        self.quiet: list[bool] = []
        self.graph: Any = None
