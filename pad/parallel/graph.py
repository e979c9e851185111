"""``pad.graph``: record the launches of a step once, then replay them without running its Python.

A time loop calls the same step with the same arrays thousands of times; each call spends tens of
microseconds of Python per launch, which on a GPU is more than a small kernel takes. ``pad.graph(step)``
runs ``step`` normally on its first call for given arguments and records the pad operations it makes
(launches, copies, and ``pad.mpi``'s messages, collectives and halo exchanges with the buffers they use);
later calls with the same arguments replay the record (``pad.replay``). On a GPU each run of device work
between two host or MPI operations is captured once as a CUDA graph (CuPy's stream capture) and replayed as
one graph launch, so the host's cost of a step no longer grows with its launches.

A step may differentiate: an ``autodiff`` (or ``fwddiff``) inside it is recorded whole, its forward
launches, the tape's copies and zeroed shadows, and its adjoint launches and adjoint messages, so that a
replay computes the same gradient without the tape's Python. The record holds the memory this needs
(shadows of intermediates, kept values, the adjoints' tapes, message buffers) as long as it is kept.

Over several ranks a replay makes the messages and collectives of a live call, with the same tags, in the
same order, accounted for alike in ``pad.mpi.stats()``, consistency checks included: a rank that records a
step anew (its arguments changed) meets ranks that replay theirs. Steps must be called alike on every rank
of their communicators, as any SPMD code is.

Arguments are compared by identity for arrays (and their shape, strides and dtype) and by value for
scalars; tuples, lists, dicts and dataclasses of them are looked into, and ``Dup``/``Const``/``Active``
by what they hold. A call whose arguments differ from every record's is recorded anew (a few records are
kept). What a replay skips is everything in the step that is not a pad operation: Python side effects,
NumPy or CuPy work, reads of array values. As with a jitted function, the step must depend on nothing but
its arguments: what it reaches through its closure (communicators, halos, scratch arrays, the ranks it
sends to) must not change between calls, nor may a host buffer it sends hold values its Python computed
(read from the device, say): the replay sends what the buffer holds then. A step that cannot be replayed
(tasks, an ``autodiff`` that returns derivatives of ``Active`` scalars or differentiates a checkpointed
loop, a receive from any rank or with any tag, ``fwddiff`` of communication, communicators made or freed,
a wait for a request it did not start, a request it does not wait for) runs as it is on every call;
``Graph.why`` says why. Inside ``autodiff``/``fwddiff``, or inside another graph's recording, a graph runs
its step, whose operations the tape, or that record, then records.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from pad import arrays, tape
from pad.annotations import Active, Const, Dup
from pad.replay import Recording, recording

__all__ = ["Graph", "graph"]

RECORDS = 8  # argument sets a graph keeps a record for


class Graph:
    """A step whose pad operations are recorded on its first call and replayed on later ones."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.why: str | None = None  # why the last call could not be replayed (None: it could)
        self._records: OrderedDict[tuple, Recording] = OrderedDict()
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any) -> None:
        if (
            tape.current() is not None or recording() is not None
        ):  # differentiated, or part of a step recorded
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
        with record.making():
            self.fn(*args)
        self.why = record.why
        if record.why is None:
            record.keep += parts
            self._records[key] = record
            if len(self._records) > RECORDS:
                self._records.popitem(last=False)

    def clear(self) -> None:
        """Forget every record (the next call of each argument set records anew)."""
        self._records.clear()

    def __repr__(self) -> str:
        return f"<pad.graph of {getattr(self.fn, '__qualname__', self.fn)!r}, {len(self._records)} records>"


_SCALARS = (bool, int, float, complex, str, bytes, type(None))
_Keyer = Callable[[Any, list[Any]], Any]
_KEYERS: dict[type, _Keyer] = {}  # per argument type: how to key it (a replay's Python is mostly keying)


def _key(a: Any, parts: list[Any]) -> Any:
    """What identifies argument ``a`` for a replay (arrays are kept alive in ``parts``)."""
    keyer = _KEYERS.get(type(a))
    if keyer is None:
        keyer = _KEYERS[type(a)] = _keyer(a)
    return keyer(a, parts)


def _keyer(a: Any) -> _Keyer:
    """How to key arguments of ``a``'s type: scalars and 0-d arrays by value, arrays by identity and layout,
    containers and dataclasses by what they hold."""
    kind = type(a)
    if isinstance(a, _SCALARS):
        return lambda x, parts: (kind, x)
    if hasattr(a, "shape") and hasattr(a, "dtype"):
        device = arrays.is_device(a)

        def array(x: Any, parts: list[Any]) -> Any:
            if not x.ndim:  # a NumPy scalar: by value
                return (kind, x.item() if hasattr(x, "item") else x)
            parts.append(x)
            return (id(x), x.shape, x.strides, x.dtype, device)

        return array
    if isinstance(a, (tuple, list)):
        return lambda x, parts: (kind, tuple([_key(v, parts) for v in x]))
    if isinstance(a, dict):
        return lambda x, parts: (dict, tuple([(k, _key(v, parts)) for k, v in x.items()]))
    if isinstance(a, (Dup, Const, Active)) or (dataclasses.is_dataclass(a) and not isinstance(a, type)):
        names = tuple(f.name for f in dataclasses.fields(a))
        if isinstance(a, (Dup, Const, Active)):  # made anew for each call: what they hold identifies them
            return lambda x, parts: (kind, tuple([_key(getattr(x, n), parts) for n in names]))

        def record(x: Any, parts: list[Any]) -> Any:
            parts.append(x)
            return (id(x), tuple([_key(getattr(x, n), parts) for n in names]))

        return record
    raise TypeError(
        f"pad.graph: cannot tell one {kind.__name__} argument from another; pass arrays, scalars, or "
        "tuples, lists, dicts or dataclasses of them (reach other objects through the step's closure)"
    )


def graph(fn: Callable[..., Any]) -> Graph:
    """``fn`` as a step whose launches are recorded once and replayed (see the module's docstring)."""
    return Graph(fn)
