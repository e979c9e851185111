"""Control-flow normalization of lowered IR: ``break``, ``continue`` and ``return`` become flags that guard
the rest of their block, and loops that can be left early become ``while`` loops, so that the tangent and
reverse sweeps only see ``if``/``for``/``while`` that run to their conditions."""

from __future__ import annotations

from dataclasses import dataclass

from pad.kernel.ir import (
    Assign,
    Break,
    Call,
    Continue,
    Expr,
    For,
    If,
    Line,
    Lit,
    Name,
    Namer,
    Return,
    Stmt,
    While,
    walk,
)


def normalize(body: list[Stmt], results: list[Name], namer: Namer) -> list[Stmt]:
    """Remove ``break``/``continue``/``return``: each sets a flag, and the rest of its block is guarded.

    ``return v`` in a helper assigns ``v`` to the helper's result variables first. Loops that can be left
    early become ``while`` loops over an explicit counter, so every loop runs to its condition.
    """
    ret = namer.fresh("ret")
    uses_return = any(isinstance(s, Return) for s in walk(body))
    out = _norm_block(body, _Flags(ret if uses_return else None, None, None), results, namer)
    if uses_return:
        out.insert(0, Assign(ret, Lit(False)))
    return out


@dataclass(frozen=True)
class _Flags:
    ret: str | None
    brk: str | None
    cont: str | None

    def exits(self) -> list[str]:
        return [f for f in (self.ret, self.brk, self.cont) if f]


def _exits(s: Stmt, flags: _Flags) -> bool:
    """Can ``s`` leave its block early (through break/continue of the current loop, or return)?"""
    if isinstance(s, (Break, Continue, Return)):
        return True
    if isinstance(s, If):
        return any(_exits(x, flags) for x in s.body + s.orelse)
    if isinstance(s, (For, While)):
        return any(isinstance(x, Return) for x in walk(s.body))
    return False


def _norm_block(stmts: list[Stmt], flags: _Flags, results: list[Name], namer: Namer) -> list[Stmt]:
    out: list[Stmt] = []
    for k, s in enumerate(stmts):
        out.extend(_norm_stmt(s, flags, results, namer))
        if _exits(s, flags) and k + 1 < len(stmts):
            rest = _norm_block(stmts[k + 1 :], flags, results, namer)
            if rest:
                out.extend(_guard(flags.exits(), rest, namer, s.line))
            break
    return out


def _guard(flags: list[str], body: list[Stmt], namer: Namer, line: Line | None) -> list[Stmt]:
    """``if not (f1 or f2 ...): body``."""
    stmts: list[Stmt] = []
    cond: Expr = Name(flags[0])
    for f in flags[1:]:
        t = namer.fresh("g")
        stmts.append(Assign(t, Call("or", (cond, Name(f))), line=line))
        cond = Name(t)
    g = namer.fresh("g")
    stmts.append(Assign(g, Call("not", (cond,)), line=line))
    stmts.append(If(Name(g), body, [], line=line))
    return stmts


def _norm_stmt(s: Stmt, flags: _Flags, results: list[Name], namer: Namer) -> list[Stmt]:
    line = s.line
    if isinstance(s, Break):
        assert flags.brk is not None, "break outside a loop"
        return [Assign(flags.brk, Lit(True), line=line)]
    if isinstance(s, Continue):
        assert flags.cont is not None, "continue outside a loop"
        return [Assign(flags.cont, Lit(True), line=line)]
    if isinstance(s, Return):
        stmts: list[Stmt] = [
            Assign(r.id, Call("copy", (v,)), line=line) for r, v in zip(results, s.values, strict=True)
        ]
        if flags.ret is not None:
            stmts.append(Assign(flags.ret, Lit(True), line=line))
        return stmts
    if isinstance(s, If):
        return [
            If(
                s.cond,
                _norm_block(s.body, flags, results, namer),
                _norm_block(s.orelse, flags, results, namer),
                line=line,
            )
        ]
    if isinstance(s, (For, While)):
        return _norm_loop(s, flags, results, namer)
    return [s]


def _norm_loop(loop: For | While, flags: _Flags, results: list[Name], namer: Namer) -> list[Stmt]:
    line = loop.line
    body_stmts = list(walk(loop.body))
    # break/continue of *this* loop: those not inside a nested loop.
    own = _own_jumps(loop.body)
    brk = namer.fresh("brk") if Break in own else None
    cont = namer.fresh("cont") if Continue in own else None
    returns = flags.ret is not None and any(isinstance(x, Return) for x in body_stmts)
    inner = _Flags(flags.ret if returns else None, brk, cont)
    body = _norm_block(loop.body, inner, results, namer)
    if cont:
        body.insert(0, Assign(cont, Lit(False), line=line))
    stops = [f for f in (brk, flags.ret if returns else None) if f]
    pre: list[Stmt] = [Assign(brk, Lit(False), line=line)] if brk else []
    if not stops:
        if isinstance(loop, For):
            return [*pre, For(loop.var, loop.start, loop.stop, loop.step, body, line=line)]
        return [*pre, While(loop.test, loop.cond, body, line=line)]
    # Loops that can end early run while (their condition) and not (a stop flag).
    test: list[Stmt]
    if isinstance(loop, For):
        trip, k = namer.fresh("trip"), namer.fresh("k")
        pre += [
            Assign(trip, Call("tripcount", (loop.start, loop.stop, loop.step)), line=line),
            Assign(k, Lit(0), line=line),
        ]
        kv = namer.fresh("t")
        body = [
            Assign(kv, Call("mul", (Name(k), loop.step)), line=line),
            Assign(loop.var, Call("add", (loop.start, Name(kv))), line=line),
            Assign(k, Call("add", (Name(k), Lit(1))), line=line),
            *body,
        ]
        c0 = namer.fresh("c")
        test = [Assign(c0, Call("lt", (Name(k), Name(trip))), line=line)]
        cond: Expr = Name(c0)
    else:
        test = list(loop.test)
        cond = loop.cond
    for f in stops:
        nf, c = namer.fresh("c"), namer.fresh("c")
        test += [
            Assign(nf, Call("not", (Name(f),)), line=line),
            Assign(c, Call("and", (cond, Name(nf))), line=line),
        ]
        cond = Name(c)
    return [*pre, While(test, cond, body, line=line)]


def _own_jumps(stmts: list[Stmt]) -> set[type]:
    found: set[type] = set()
    for s in stmts:
        if isinstance(s, (Break, Continue)):
            found.add(type(s))
        elif isinstance(s, If):
            found |= _own_jumps(s.body) | _own_jumps(s.orelse)
    return found
