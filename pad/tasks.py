"""Task graphs: ``spawn``/``wait`` on a thread pool, differentiated by swapping spawn and wait.

Inside ``autodiff`` each task records its operations into its own list. The spawner's recording gets a
record whose adjoint *waits* for the task's adjoint, the waiter's recording one whose adjoint *spawns* it,
so the reverse pass is the primal task graph with its edges reversed and independent branches run their
adjoints concurrently. In ``fwddiff`` tasks simply run their operations with tangents.

Race-free accumulation. Two adjoint tasks may accumulate into one shadow array (fan-out in the primal:
two tasks read one array). Once a task is spawned, every record carries the shadows its operation asked
for, and its adjoint runs holding one lock per shadow array (taken in a fixed order, so no deadlock).
Adjoints that touch disjoint shadows run concurrently; two that share a shadow take turns, one
operation at a time, so no ``+=`` is lost. Task records themselves hold no lock while waiting.

A task that has not started when someone waits for it runs inline in the waiting thread, so tasks that
wait for the tasks they spawn never exhaust a bounded pool.

For authors of operations: the guard sees the shadows an operation asked ``ctx.shadow`` for since the
previous record of the same task, so an operation must ask for its shadows (not cache them across calls)
before it records. Tasks spawned inside a checkpointed step must be waited for within that step.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

from pad import replay, tape

__all__ = ["Task", "executor", "spawn", "wait_all"]

_executor: contextvars.ContextVar[Executor | None] = contextvars.ContextVar("pad_task_executor", default=None)
_default_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _pool() -> Executor:
    chosen = _executor.get()
    return chosen if chosen is not None else _default()


def _default() -> Executor:
    global _default_pool
    with _pool_lock:
        if _default_pool is None:
            _default_pool = ThreadPoolExecutor(os.cpu_count() or 2, thread_name_prefix="pad-task")
        return _default_pool


@contextlib.contextmanager
def executor(ex: Executor) -> Iterator[Executor]:
    """Run the tasks spawned in this block (and their adjoints) on ``ex``, an in-process executor."""
    if not isinstance(ex, Executor) or isinstance(ex, ProcessPoolExecutor):
        raise TypeError(
            f"pad.tasks.executor needs a concurrent.futures.Executor that shares this process's memory "
            f"(e.g. ThreadPoolExecutor), got {type(ex).__name__}"
        )
    token = _executor.set(ex)
    try:
        yield ex
    finally:
        _executor.reset(token)


class _Job:
    """Work run once, by a pool thread or inline by the first waiter that finds it not yet started."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn = fn
        self._vars = contextvars.copy_context()  # the pad context and recording travel with the job
        self._lock = threading.Lock()
        self._started = False
        self._done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def submit(self, ex: Executor) -> None:
        try:
            ex.submit(self._run_if_unclaimed)
        except RuntimeError:  # the user's executor was shut down (e.g. before the reverse pass)
            _default().submit(self._run_if_unclaimed)

    def _claim(self) -> bool:
        with self._lock:
            started, self._started = self._started, True
            return not started

    def _run_if_unclaimed(self) -> None:
        if self._claim():
            try:
                self.result = self._vars.run(self._fn)
            except BaseException as exc:  # re-raised in the waiter, traceback included
                self.error = exc
            finally:
                self._done.set()

    def join(self) -> Any:
        """Wait for the job (running it here if nobody started it); re-raise its exception."""
        self._run_if_unclaimed()
        self._done.wait()
        if self.error is not None:
            raise self.error
        return self.result


class Task:
    """A spawned call ``fn(*args)``; ``wait()`` returns its result or re-raises its exception."""

    def __init__(self, fn: Callable[..., Any], args: tuple, where: str) -> None:
        self.where = where
        self._fn, self._args = fn, args
        self._recorded = tape.is_recording()
        self._records: list[tape.Record] = []
        self._executor = _pool()
        self._job = _Job(self._body)
        self._waited = False
        self._adjoint: _Job | None = None
        self._adjoint_spawned = threading.Event()

    def _body(self) -> Any:
        if not self._recorded:
            return self._fn(*self._args)
        with tape.recording_into(self._records):
            return self._fn(*self._args)

    def wait(self) -> Any:
        """Wait for the task; inside ``autodiff`` the first wait is where the adjoint will be spawned."""
        first = not self._waited
        self._waited = True
        ctx = tape.current()
        if first and ctx is not None:
            _forget(ctx, self)
        result = self._job.join()
        if first and ctx is not None and ctx.reverse_mode:
            if self._recorded != tape.is_recording():
                raise RuntimeError(
                    f"{self!r} was spawned and waited for on different sides of a checkpointed step or "
                    "segment; wait for the tasks a step spawns within that step"
                )
            if self._recorded:
                ctx.record(_Joined(self))
        return result

    def _spawn_adjoint(self) -> None:
        self._adjoint = _Job(lambda: tape.reverse_records(self._records))
        self._adjoint.submit(self._executor)
        self._adjoint_spawned.set()

    def _wait_adjoint(self) -> None:
        self._adjoint_spawned.wait()
        assert self._adjoint is not None
        self._adjoint.join()

    def __repr__(self) -> str:
        return f"<pad task {getattr(self._fn, '__qualname__', self._fn)!s} spawned at {self.where}>"


class _Spawned:
    """Recorded where a task was spawned: its adjoint waits for the task's adjoint."""

    __slots__ = ("task",)

    def __init__(self, task: Task) -> None:
        self.task = task

    def reverse(self) -> None:
        self.task._wait_adjoint()


class _Joined:
    """Recorded where a task was first waited for: its adjoint spawns the task's adjoint."""

    __slots__ = ("task",)

    def __init__(self, task: Task) -> None:
        self.task = task

    def reverse(self) -> None:
        self.task._spawn_adjoint()


class _ShadowLocks:
    """A context's record guard: one lock per shadow array (its base array), taken in a fixed order."""

    def __init__(self) -> None:
        self._locks: dict[int, threading.Lock] = {}
        self._lock = threading.Lock()

    def __call__(self, rec: tape.Record, shadows: list[Any]) -> tape.Record:
        if isinstance(rec, (_Spawned, _Joined)):  # they wait for adjoint tasks: never hold a lock there
            return rec
        with self._lock:  # the base arrays stay alive with the record, so their ids stay unique
            locks = [
                self._locks.setdefault(k, threading.Lock()) for k in sorted({id(_base(s)) for s in shadows})
            ]
        return _Guarded(rec, locks)


def _base(a: Any) -> Any:
    while getattr(a, "base", None) is not None and hasattr(a.base, "shape"):
        a = a.base
    return a


def unguarded(rec: Any) -> Any:
    """The record that ``rec`` guards with locks, if it is such a guard (else ``rec``)."""
    while isinstance(rec, _Guarded):
        rec = rec.rec
    return rec


class _Guarded:
    """A record whose adjoint runs holding the locks of the shadows its operation touched."""

    __slots__ = ("locks", "rec")

    def __init__(self, rec: tape.Record, locks: list[threading.Lock]) -> None:
        self.rec, self.locks = rec, locks

    def reverse(self) -> None:
        for lock in self.locks:
            lock.acquire()
        try:
            self.rec.reverse()
        finally:
            for lock in reversed(self.locks):
                lock.release()


_outstanding: weakref.WeakKeyDictionary[tape.Context, dict[int, Task]] = weakref.WeakKeyDictionary()
_outstanding_lock = threading.Lock()


def _forget(ctx: tape.Context, task: Task) -> None:
    with _outstanding_lock:
        _outstanding.get(ctx, {}).pop(id(task), None)


def spawn(fn: Callable[..., Any], *args: Any) -> Task:
    """Run ``fn(*args)`` asynchronously; inside ``autodiff`` its adjoint runs as a task too."""
    record = replay.recording()
    if record is not None:
        record.refuse("it spawns tasks")
    frame = sys._getframe(1)
    task = Task(fn, args, f"{frame.f_code.co_filename}:{frame.f_lineno}")
    ctx = tape.current()
    if ctx is not None:
        with _outstanding_lock:
            _outstanding.setdefault(ctx, {})[id(task)] = task
        if task._recorded:
            if ctx.guard is None:
                ctx.guard = _ShadowLocks()
            ctx.record(_Spawned(task))
    task._job.submit(task._executor)
    return task


def wait_all(tasks: Iterable[Task]) -> list[Any]:
    """Wait for every task in order; return their results."""
    return [t.wait() for t in tasks]


@tape.on_forward_end
def _check_all_waited(ctx: tape.Context) -> None:
    """A task never waited for would leave its part of the gradient out: refuse it."""
    with _outstanding_lock:
        left = list(_outstanding.pop(ctx, {}).values())
    if not left:
        return
    for task in left:  # let them finish before the context goes away
        with contextlib.suppress(BaseException):
            task._job.join()
    names = "; ".join(repr(t) for t in left)
    raise RuntimeError(
        f"{len(left)} task(s) spawned inside pad.autodiff/fwddiff were never waited for: {names}. "
        "Call task.wait() or pad.tasks.wait_all(...) before the differentiated function returns."
    )
