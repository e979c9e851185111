"""Every transfer pad makes inside ``autodiff``/``fwddiff``: debug log, byte counters and traces; and, in
every phase, the time spent in pad.mpi and the bytes of device buffers staged through host memory.

Each MPI call an op makes through a ``Wire`` (``pad.mpi._core``) calls :func:`note` once, with what the
call's arguments and status say. The byte count of a call is the payload this rank receives *from other
ranks* by the op's semantics (a rank's own block is not counted, nor are the tiny consistency checks), so
the count is independent of the algorithm MPI picks and a transpose moves exactly
what its forward moved: summed over ranks, Bcast's ``(size-1)*n`` equals its adjoint Reduce's.

Phases: ``plain`` (calls outside ``autodiff``/``fwddiff``, counted but not their payload), ``forward``
(autodiff's forward sweep), ``reverse`` (its adjoint) and ``tangent`` (fwddiff). Time is wall-clock time
inside pad.mpi's calls, halo exchanges and adjoints (the outermost of nested ones), waits for the device
included: staging a device buffer waits for the kernels that wrote it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = [
    "Event", "note", "plain_call", "reset_stats", "say", "set_debug", "staged", "start", "stats", "stop", "trace",
]  # fmt: skip


@dataclass(frozen=True)
class Event:
    """One MPI call pad made: in which phase, which call, with whom, how many bytes came in."""

    rank: int
    phase: str  # "forward" (autodiff's forward sweep), "reverse" (adjoint) or "tangent" (fwddiff)
    call: str  # the MPI call pad made, e.g. "Irecv"
    where: str  # "-> 1", "<- 0", "root 0" or ""
    tag: int | None
    nbytes: int  # payload received from other ranks
    op: str  # the user's op this call belongs to (forward) or is the adjoint of (reverse)
    adjoint: str = ""  # forward events: what the reverse pass will call

    def line(self) -> str:
        """The debug-log line, e.g. ``r0 | Isend -> 1 tag 7 | adjoint: Irecv``."""
        head = f"{self.call} {self.where}".rstrip() + (f" tag {self.tag}" if self.tag is not None else "")
        if self.phase == "reverse":
            return f"r{self.rank} | adjoint of {self.op}: {head}"
        tail = f" | adjoint: {self.adjoint}" if self.adjoint else ""
        label = "" if self.phase == "forward" else "tangent "
        return f"r{self.rank} | {label}{head}{tail}"


_debug = os.environ.get("PAD_MPI_DEBUG", "") not in ("", "0")
_traces: list[list[Event]] = []
PHASES = ("plain", "forward", "reverse", "tangent")
_bytes: dict[str, int] = dict.fromkeys(PHASES, 0)
_calls: dict[str, int] = dict.fromkeys(PHASES, 0)
_staged: dict[str, int] = dict.fromkeys(PHASES, 0)
_copies: dict[str, int] = dict.fromkeys(PHASES, 0)
_seconds: dict[str, float] = dict.fromkeys(PHASES, 0.0)
_depth = threading.local()


def set_debug(on: bool) -> None:
    """Turn the per-rank transfer log on or off (``PAD_MPI_DEBUG=1`` turns it on at import)."""
    global _debug
    _debug = on


def note(
    rank: int, phase: str, call: str, where: str, tag: int | None, nbytes: int, op: str, adj: str
) -> None:
    """Account for one MPI call: counters; traces and the debug log when they are on (see :class:`Event`)."""
    _bytes[phase] += nbytes
    _calls[phase] += 1
    if not (_traces or _debug):
        return
    event = Event(rank, phase, call, where, tag, nbytes, op, adj)
    for events in _traces:
        events.append(event)
    if _debug:
        print(event.line(), file=sys.stderr, flush=True)


def say(rank: int, text: str) -> None:
    """A line of the debug log that is no transfer (how device buffers travel, say)."""
    if _debug:
        print(f"r{rank} | {text}", file=sys.stderr, flush=True)


def plain_call() -> None:
    """Count a call outside autodiff/fwddiff."""
    _calls["plain"] += 1


def staged(phase: str, nbytes: int) -> None:
    """Account for one copy of a device buffer to or from host memory."""
    _staged[phase] += nbytes
    _copies[phase] += 1


def start() -> float:
    """Start timing a pad.mpi call; nested calls (a halo exchange's messages) count within the outermost."""
    depth = getattr(_depth, "n", 0)
    _depth.n = depth + 1
    return time.perf_counter() if depth == 0 else -1.0


def stop(phase: str, began: float) -> None:
    """End what :func:`start` began, in ``phase``."""
    _depth.n -= 1
    if began >= 0.0:
        _seconds[phase] += time.perf_counter() - began


def stats() -> dict[str, dict[str, float]]:
    """Per phase: bytes received from other ranks and MPI calls made by pad on this rank (inside
    autodiff/fwddiff; outside them, ``plain``, the calls only), bytes of device buffers staged through host
    memory and the copies that moved them, and seconds spent in pad.mpi."""
    return {
        phase: {
            "bytes": _bytes[phase],
            "calls": _calls[phase],
            "staged_bytes": _staged[phase],
            "staged_copies": _copies[phase],
            "seconds": _seconds[phase],
        }
        for phase in PHASES
    }


def reset_stats() -> None:
    for phase in PHASES:
        _bytes[phase] = _calls[phase] = _staged[phase] = _copies[phase] = 0
        _seconds[phase] = 0.0


@contextlib.contextmanager
def trace() -> Iterator[list[Event]]:
    """Collect the :class:`Event` of every MPI call pad makes on this rank inside the block."""
    events: list[Event] = []
    _traces.append(events)
    try:
        yield events
    finally:
        _traces.remove(events)
