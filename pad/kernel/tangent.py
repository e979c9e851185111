"""Forward mode of one kernel iteration: each statement followed by its tangent, in program order."""

from __future__ import annotations

from dataclasses import dataclass

from pad.kernel.analysis import NO_DEFINITIONS, Activity, Definitions, owned
from pad.kernel.ir import (
    Assign,
    Call,
    Elem,
    Expr,
    For,
    If,
    Lit,
    LocalArray,
    Name,
    Stmt,
    Store,
    While,
    call,
)
from pad.kernel.names import private, tan
from pad.kernel.rules import RULES


@dataclass
class Tangent:
    """Builds the tangent code of a kernel body."""

    act: Activity
    launch_index: str
    privatized: set[str]  # arrays reduced into at shared indices (their tangents are privatized too)
    defs: Definitions = NO_DEFINITIONS  # what index ownership may look through

    def block(self, stmts: list[Stmt]) -> list[Stmt]:
        out: list[Stmt] = []
        for s in stmts:
            out += self.stmt(s)
        return out

    def stmt(self, s: Stmt) -> list[Stmt]:
        if isinstance(s, Assign):
            if s.target not in self.act.scalars:
                return [s]
            return [s, Assign(tan(s.target), self.derivative(s), line=s.line)]
        if isinstance(s, Store):
            if s.array not in self.act.arrays:
                return [s]
            value: Expr = Lit(0.0, typed=True)
            if isinstance(s.value, Name) and self.act.expr(s.value):
                value = Name(tan(s.value.id))
            target = tan(s.array)
            if (
                s.accumulate
                and s.array in self.privatized
                and not owned(s.index, self.launch_index, self.defs)
            ):
                target = private(target)
            return [s, Store(target, s.index, value, s.accumulate, line=s.line)]
        if isinstance(s, If):
            return [If(s.cond, self.block(s.body), self.block(s.orelse), line=s.line)]
        if isinstance(s, For):
            return [For(s.var, s.start, s.stop, s.step, self.block(s.body), line=s.line)]
        if isinstance(s, While):
            return [While(s.test, s.cond, self.block(s.body), line=s.line)]
        if isinstance(s, LocalArray):
            return [s]
        raise AssertionError(f"unexpected statement {s}")

    def derivative(self, s: Assign) -> Expr:
        value = s.value
        if isinstance(value, Elem):
            return (
                Elem(tan(value.array), value.index)
                if value.array in self.act.arrays
                else Lit(0.0, typed=True)
            )
        if not isinstance(value, Call) or RULES[value.op].partials is None:
            return Lit(0.0, typed=True)
        partials = RULES[value.op].partials(Name(s.target), *value.args)  # type: ignore[misc]
        total: Expr | None = None
        for arg, partial in zip(value.args, partials, strict=True):
            if partial is not None and self.act.expr(arg):
                assert isinstance(arg, Name)
                term = call("mul", partial, Name(tan(arg.id)))
                total = term if total is None else call("add", total, term)
        return total if total is not None else Lit(0.0, typed=True)
