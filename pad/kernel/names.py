"""Every name the kernel compiler generates, made in one place.

Generated names start with an underscore (a kernel's own variables that do must be renamed ``_u<name>`` by
the frontend): a derivative is its variable's name behind a prefix (``_b_y``, the adjoint of ``y``), and
temporaries are ``_<stem><count>`` (``ir.Namer``) until ``readable`` names them after what they hold
(``x_i`` for ``x[i]``, ``sin_x`` for ``math.sin(x_i)``, ``a_times_b`` for ``a * b``, ``y_i_new`` for the
value stored into ``y[i]``), and so are their adjoints (``_b_y_i_new``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from pad.kernel.ir import Assign, Call, Elem, Expr, Lit, Name, Stmt, Store, walk
from pad.kernel.rules import RULES

ADJOINT = "_b_"  # the adjoint (shadow) of a variable or array
TANGENT = "_d_"  # the tangent of a variable or array
PRIVATE = "_pv"  # where a thread accumulates into an array: its private buffer, or the array itself
BUFFER = "_priv"  # a launcher's parameter holding an array's private buffers, one per slot
UNORDERED = "_any"  # prefix of loop variables of loops whose iterations may run in any order
CONSTANT = "_k_"  # a module-level array a kernel reads as a constant table
_PREFIXES = (PRIVATE, ADJOINT, TANGENT)
_TEMPORARY = re.compile(r"_t\d+$")  # the frontend's three-address temporaries


def adj(name: str) -> str:
    """Name of the adjoint (shadow) of a variable or array."""
    return ADJOINT + name


def tan(name: str) -> str:
    """Name of the tangent of a variable or array."""
    return TANGENT + name


def constant(name: str) -> str:
    """Name, in generated code, of the constant table a kernel's module calls ``name``."""
    return CONSTANT + name


def private(name: str) -> str:
    """Name of the calling thread's private accumulation buffer for an array."""
    return PRIVATE + name


def buffer(name: str) -> str:
    """Name of the launcher parameter holding the private buffers of an array (or of its derivative)."""
    return BUFFER + name


def unbuffer(name: str) -> str:
    """The array whose private buffers ``buffer(array)`` names."""
    return name.removeprefix(BUFFER)


def split(name: str) -> tuple[str, str]:
    """(prefixes, primal name): ``_pv_b_x`` -> ``("_pv_b_", "x")``."""
    prefixes = ""
    changed = True
    while changed:
        changed = False
        for p in _PREFIXES:
            if name.startswith(p):
                prefixes, name, changed = prefixes + p, name[len(p) :], True
    return prefixes, name


def base_name(name: str) -> str:
    """The primal name behind a shadow, tangent or private-buffer name."""
    return split(name)[1]


# Names generated code uses besides the kernel's: a readable name must not shadow one.
RESERVED = frozenset({"math", "np", "cuda", "njit", "prange", "numba"})


def first_read(namer: Any, e: Elem) -> str:
    """Name of the value an element holds at a thread's start (``optimize.owned_loads_first``):
    ``_first_x_i3`` for ``x[i]``, ``_first_b_y_i4`` for the seed ``_b_y[i]``."""
    where = _name(e, {}) or ""
    return namer.fresh("first" + ("_" if where and not where.startswith("_") else "") + where)


def readable(source: list[Stmt], taken: Iterable[str]) -> dict[str, str]:
    """Names for the temporaries of the lowered kernel ``source`` after what they hold: ``x_i`` for
    ``x[i]``, ``sin_x`` for ``math.sin`` of it, ``x_i_minus_x_j`` for ``x[i] - x[j]``; else, for the value a
    statement stores, ``y_i_new`` (into ``y[i]``) or ``v_new`` (into ``v``); none for longer arithmetic (its
    line shows it). A name in ``taken`` or ``RESERVED``, or given before, gets a suffix (``y_i_2``)."""
    defs = {s.target: s.value for s in walk(source) if isinstance(s, Assign) and _TEMPORARY.match(s.target)}
    stored = _stored(source)
    used = set(taken) | RESERVED
    out: dict[str, str] = {}
    for t, value in defs.items():
        name = next((n for n in (_name(value, defs), stored.get(t)) if n and n.isidentifier()), None)
        if name is None:  # nothing to call it by, or a name that is no identifier (``2_times_x``)
            continue
        unique, k = name, 1
        while unique in used:
            k += 1
            unique = f"{name}_{k}"
        used.add(unique)
        out[t] = unique
    return out


def _stored(source: list[Stmt]) -> dict[str, str]:
    """The temporaries whose values a statement stores, named after where: ``y_i_new``, ``v_new``."""
    out: dict[str, str] = {}
    for s in walk(source):
        if isinstance(s, Store) and not s.accumulate:
            where, value = _name(Elem(s.array, s.index), {}), s.value
        elif isinstance(s, Assign) and isinstance(s.value, Call) and s.value.op == "copy":
            where, value = (None if s.target.startswith("_") else s.target), s.value.args[0]
        else:
            continue
        if where is not None and isinstance(value, Name):
            out.setdefault(value.id, f"{where}_new")
    return out


def _name(value: Expr, defs: dict[str, Expr]) -> str | None:
    if isinstance(value, Elem):
        index = [_index(x) for x in value.index]
        return None if None in index else f"{value.array}_{''.join(index)}"  # type: ignore[arg-type]
    if isinstance(value, Call) and value.op in _OPERATORS:
        words = [_operand(a, defs) for a in value.args]
        if None in words:
            return None
        if len(words) == 1:
            return f"{_OPERATORS[value.op]}_{words[0]}"
        return f"{words[0]}_{_OPERATORS[value.op]}_{words[1]}"
    if isinstance(value, Call) and RULES[value.op].template[:1].isalpha() and value.op not in _UNNAMED:
        stem = _stem(value.args[0], defs)
        return None if stem is None else f"{value.op}_{stem}"
    return None


# Operators named in words between their operands' names (``a_times_b``), or before their one (``neg_x``).
_OPERATORS = {
    "add": "plus",
    "sub": "minus",
    "mul": "times",
    "div": "over",
    "neg": "neg",
    **{op: op for op in ("lt", "le", "gt", "ge", "eq", "ne")},
}


def _operand(e: Expr, defs: dict[str, Expr]) -> str | None:
    """What an operand is called in an operator's name: a variable's name, an array element's (``x_i``), a
    function's result's (``sin_x``), a plain number's digits (``0_5``); none for an operator's result (the
    name would grow with the expression)."""
    if isinstance(e, Lit):
        digits = str(e.value)
        return digits.replace(".", "_") if re.fullmatch(r"\d+(\.\d+)?", digits) else None
    if not isinstance(e, Name):
        return None
    if e.id not in defs:
        return None if e.id.startswith("_") else e.id
    value = defs[e.id]
    return None if isinstance(value, Call) and value.op in _OPERATORS else _name(value, defs)


def _index(e: Expr) -> str | None:
    if isinstance(e, Name) and not e.id.startswith("_"):
        return e.id
    if isinstance(e, Lit) and type(e.value) is int and e.value >= 0:
        return str(e.value)
    return None


def _stem(e: Expr, defs: dict[str, Expr]) -> str | None:
    """What a value is called inside a name: a variable's name, an array element's array, ``sin_x``."""
    if isinstance(e, Name):
        if e.id in defs:
            value = defs[e.id]
            return value.array if isinstance(value, Elem) else _name(value, defs)
        return None if e.id.startswith("_") else e.id
    return None


# Functions whose result is better shown than named (operators are never named): casts, shapes.
_UNNAMED = frozenset({"f4", "f8", "i4", "i8", "int", "float", "bool", "indicator", "shape", "tripcount"})


def rename(name: str, names: dict[str, str]) -> str:
    """``name`` with the primal name behind its prefixes renamed by ``names`` (``_b__t1`` -> ``_b_x_i``)."""
    prefixes, base = split(name)
    return prefixes + names[base] if base in names else name


# -------------------------------------------------------------------------- a generated launcher's arguments
# In order: ``head(...)``, the kernel's parameters after the launch index, the launcher's extras (shadows or
# tangents, private buffers, ``ACTIVE_SCALARS``), then a CUDA adjoint's ``TAPE``. emit prints them;
# pad/parallel/cpu.py and gpu.py pass them.
# a launch by a plan (pad/parallel/plans.py), and its counters of the groups handed out
PLAN = ("_slots", "_order", "_segs", "_colours", "_claimed")
TAPE = ("_tape", "_overflow")
ACTIVE_SCALARS = "_act"  # the sums of active scalars' adjoints


def head(target: str, planned: bool = False, shares_loops: bool = False) -> tuple[str, ...]:
    """The arguments before the kernel's: the launch's size; on CPUs the number of chunks, then the plan
    of a launch by a plan; on GPUs the lanes per launch index where they share loops."""
    if target == "cpu":
        return ("_n", "_nchunks", *(PLAN if planned else ()))
    return ("_n", "_G") if shares_loops else ("_n",)


def ordered(names: Sequence[str], **values: Any) -> list[Any]:
    """``values`` in the order of ``names``."""
    return [values[n] for n in names]
