"""``segment``: run a function keeping nothing for the reverse pass but its inputs; recompute it there."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from pad import tape
from pad.checkpoint.layout import arrays_in
from pad.checkpoint.store import _root


class _SegmentRecord:
    """``segment``'s record: restore the inputs, rerun ``fn`` recording it, and reverse that."""

    def __init__(self, fn: Callable[..., Any], args: tuple, inputs: list[tuple[Any, tape.Kept]]) -> None:
        self._fn, self._args, self._inputs = fn, args, inputs

    def reverse(self) -> None:
        ctx = tape.current()
        assert ctx is not None
        changed = [(ctx.writable(a), k) for a, k in self._inputs if k.copied]
        now = [a.copy() for a, _ in changed]  # to leave the primal arrays as the reverse pass found them
        ctx.will_write([a for a, _ in changed])
        for a, k in changed:
            a[...] = k.array
        for _, k in self._inputs:
            k.release()
        records: list[tape.Record] = []
        with tape.recording_into(records):
            self._fn(*self._args)
        tape.reverse_records(records)
        for (a, _), value in zip(changed, now, strict=True):
            a[...] = value


def segment(fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn(*args)`` keeping nothing for the reverse pass but its inputs; recompute it there.

    Inside ``autodiff``, ``fn`` must update its arguments in place (an array it returns would be a new one
    when recomputed, cut off from its seed).
    """
    if not tape.is_recording():
        return fn(*args)
    ctx = tape.current()
    assert ctx is not None
    inputs: dict[int, tuple[Any, tape.Kept]] = {}
    for _, a in arrays_in(args, "args"):
        r = _root(a)
        inputs.setdefault(id(r), (r, ctx.keep(r)))
    written: dict[int, tuple[weakref.ref, Any]] = {}

    def before(arrays: list[Any]) -> None:
        for a in arrays:
            r = _root(a)
            if id(r) not in inputs and id(r) not in written:
                written[id(r)] = (weakref.ref(r), r.copy())

    with ctx.before_writes(lambda targets, _: before(targets)), tape.unrecorded():
        result = fn(*args)
    if any(True for _ in arrays_in(result, "result")):
        raise TypeError(
            "pad.checkpoint.segment: fn returned an array; inside autodiff a segment must update its "
            "arguments in place"
        )
    kept = list(inputs.values())
    for ref, copy in written.values():
        r = ref()
        if r is not None:  # state outside the arguments (e.g. a closure's array): restore it as well
            k = tape.Kept(copy)
            k.copied = True
            kept.append((r, k))
    ctx.record(_SegmentRecord(fn, args, kept))
    return result
