"""``PAD_DEBUG``: kernels whose every array access is bounds-checked, in the primal, tangent and adjoint.

``PAD_DEBUG=1`` in the environment, or ``pad.debug(True)`` (on from then on) or ``with pad.debug():`` (on in
the block), makes launches compile and run checked variants: every index of every array access (the
arrays, their shadows, private buffers, local arrays, tuples indexed at run time) is tested against the
array's shape, negative indices included, and the first one out of range stops the launch with an
``IndexError`` naming the kernel, the source line, the array, the index, the shape and the launch index.
Checked variants are separate cache entries, and a CPU launch runs its chunks one after another (so the
error comes back from numba's compiled code); without ``PAD_DEBUG`` nothing of this is generated. On the
CUDA target the checks run on numba's CUDA simulator only: numba's GPU code cannot raise an error carrying
values, and GPU launches run unchecked (run the program on NumPy arrays to check it).
"""

from __future__ import annotations

import ast
import os
import re
import warnings
from types import TracebackType
from typing import Any

from pad.kernel.ir import Line
from pad.kernel.names import ADJOINT, PRIVATE, TANGENT

_state = {"on": os.environ.get("PAD_DEBUG", "") not in ("", "0")}


def enabled() -> bool:
    """Whether launches compile and run bounds-checked kernels now."""
    return _state["on"]


class debug:  # used as a function: pad.debug(True)
    """``pad.debug(True)`` turns bounds-checked kernels on (``False``: off); as ``with pad.debug():`` it
    turns them on for the block and restores the previous setting after it."""

    def __init__(self, on: bool = True) -> None:
        self.before = _state["on"]
        _state["on"] = bool(on)

    def __enter__(self) -> debug:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        _state["on"] = self.before


def gpu_unchecked() -> None:
    """Say once that PAD_DEBUG does not check kernels on a GPU."""
    if not _state.get("warned"):
        _state["warned"] = True
        warnings.warn(
            "PAD_DEBUG checks kernels on CPU threads and on numba's CUDA simulator; GPU launches run "
            "unchecked (run the program on NumPy arrays to check it)",
            stacklevel=4,
        )


_PREFIXES = {ADJOINT: "the adjoint of ", TANGENT: "the tangent of "}


def _array(name: str) -> str:
    """How the user knows a generated array: ``_b_x`` is the adjoint of ``x``; private buffers are their array."""
    name = name.removeprefix(PRIVATE)
    for prefix, words in _PREFIXES.items():
        if name.startswith(prefix):
            return words + _array(name[len(prefix) :])
    return "a tuple" if name == "" else repr(name)


def out_of_range(
    error: IndexError, kernel: str, mode: str, sites: list[tuple[Line | None, str]]
) -> str | None:
    """The message for an IndexError raised by a checked access (``runtime.check_index``), else None.

    numba passes the error's values as its arguments; numba's CUDA simulator passes them as text after the
    thread's coordinates.
    """
    args: Any = error.args
    if len(args) == 1 and isinstance(args[0], str):
        text = re.sub(r"np\.\w+\((-?\d+)\)", r"\1", args[0])  # np.int64(2) -> 2
        found = re.search(r"\((\d+), (\([^()]*\)), (\([^()]*\)), (-?\d+)\)$", text)
        args = tuple(ast.literal_eval(g) for g in found.groups()) if found else ()
    if len(args) != 4 or not isinstance(args[0], int) or not 0 <= args[0] < len(sites):
        return None
    site, index, shape, at = args
    line, array = sites[site]
    return (
        f"{line}: in {kernel} ({mode}), launch index {at}: index {tuple(index)} is out of range for "
        f"{_array(array)} of shape {tuple(shape)}"
    )


__all__ = ["debug", "enabled", "out_of_range"]
