"""Frontend: parse a kernel's Python source, check it is in the supported subset, lower it to the IR.

Lowering produces three-address code (every operation's result is a fresh temporary; user variables are
assigned by ``copy``), inlines ``@pad.func`` helpers with their variables renamed, flattens tuples into
scalars; ``pad.kernel.controlflow`` then removes ``break``, ``continue`` and ``return``, so the
transformations only see ``if``/``for``/``while``.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pad.kernel.controlflow import normalize
from pad.kernel.ir import (
    ArrayKind,
    Assign,
    Break,
    Call,
    Continue,
    Elem,
    Expr,
    For,
    If,
    KernelSyntaxError,
    Kind,
    Line,
    Lit,
    LocalArray,
    Name,
    Namer,
    Return,
    Stmt,
    Store,
    TupleKind,
    While,
)
from pad.kernel.names import constant
from pad.kernel.rules import BUILTINS, MATH, NUMPY, RULES


# ---------------------------------------------------------------------------------------------- source
@dataclass
class Source:
    """A parsed Python function and where it came from (for error messages)."""

    fn: Callable[..., Any]
    tree: ast.FunctionDef
    filename: str
    first_line: int
    env: dict[str, Any]

    @classmethod
    def of(cls, fn: Callable[..., Any]) -> Source:
        try:
            lines, first = inspect.getsourcelines(fn)
        except (OSError, TypeError) as exc:
            raise KernelSyntaxError(f"cannot read the source of {fn!r}: {exc}") from None
        module = ast.parse(textwrap.dedent("".join(lines)))
        tree = module.body[0]
        if not isinstance(tree, ast.FunctionDef):
            raise KernelSyntaxError(f"{fn!r} is not a plain function definition")
        env = dict(fn.__globals__)
        if fn.__closure__:
            env.update(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__), strict=True))
        return cls(fn, tree, inspect.getsourcefile(fn) or "<unknown>", first - 1, env)

    def error(self, node: ast.AST | None, what: str, instead: str = "") -> KernelSyntaxError:
        line = self.first_line + getattr(node, "lineno", 1)
        msg = f"{self.filename}:{line}: in {self.fn.__name__}: {what}"
        if instead:
            msg += f"; {instead}"
        return KernelSyntaxError(msg)

    def line(self, node: ast.AST) -> Line:
        return Line(self.filename, self.first_line + getattr(node, "lineno", 1))


_AUGOPS = {
    ast.Add: "add",
    ast.Sub: "sub",
    ast.Mult: "mul",
    ast.Div: "div",
    ast.Pow: "pow",
    ast.FloorDiv: "floordiv",
    ast.Mod: "mod",
    ast.BitAnd: "bitand",
    ast.BitOr: "bitor",
    ast.BitXor: "bitxor",
    ast.LShift: "lshift",
    ast.RShift: "rshift",
}
_LOOPS = "write a for loop over range(...)"
_CONTAINERS = "use a tuple, or pad.local_array(n) for values that change"
_NO_EXCEPTIONS = (
    "kernels cannot raise or catch exceptions: test conditions with if, or store a flag into an array"
)
#: Constructs outside the kernel language: what they are, in words, and what to write instead.
_UNSUPPORTED: dict[type, tuple[str, str]] = {
    ast.Dict: ("a dict", _CONTAINERS),
    ast.Set: ("a set", _CONTAINERS),
    ast.List: ("a list", _CONTAINERS),
    ast.ListComp: ("a list comprehension", _LOOPS),
    ast.SetComp: ("a set comprehension", _LOOPS),
    ast.DictComp: ("a dict comprehension", _LOOPS),
    ast.GeneratorExp: ("a generator expression", _LOOPS),
    ast.Lambda: ("lambda", "define a @pad.func helper at module level"),
    ast.Yield: ("yield", "kernels store results into arrays"),
    ast.YieldFrom: ("yield from", "kernels store results into arrays"),
    ast.Await: ("await", "kernels run synchronously"),
    ast.JoinedStr: ("an f-string", "kernels compute with numbers only"),
    ast.NamedExpr: ("the := operator", "assign in a statement of its own"),
    ast.Starred: ("* unpacking", "unpack a tuple by name: a, b = t"),
    ast.Try: ("try/except", _NO_EXCEPTIONS),
    ast.Raise: ("raise", _NO_EXCEPTIONS),
    ast.Assert: ("assert", _NO_EXCEPTIONS),
    ast.With: ("with", "kernels hold no resources: write the body without it"),
    ast.AsyncWith: ("async with", "kernels run synchronously"),
    ast.AsyncFor: ("async for", "kernels run synchronously"),
    ast.AsyncFunctionDef: ("an async function", "kernels run synchronously"),
    ast.FunctionDef: ("a nested function", "define a @pad.func helper at module level"),
    ast.ClassDef: ("a class definition", "define classes outside kernels; pass their numbers as arguments"),
    ast.Delete: ("del", "leave the variable unused"),
    ast.Global: ("global", "pass the value as a kernel argument, and store results into arrays"),
    ast.Nonlocal: ("nonlocal", "pass the value as a kernel argument, and store results into arrays"),
    ast.Import: ("import", "import at module level"),
    ast.ImportFrom: ("import", "import at module level"),
    ast.Match: ("match", "use if/elif"),
}
if hasattr(ast, "TryStar"):
    _UNSUPPORTED[ast.TryStar] = ("try/except*", _NO_EXCEPTIONS)
_CMPOPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}


def _is_helper(obj: Any) -> bool:
    return getattr(obj, "_pad_func", False)


def _is_local_array(obj: Any) -> bool:
    return getattr(obj, "_pad_local_array", False)


# ---------------------------------------------------------------------------------------------- tables
#: The largest module-level array a kernel may read as a constant table: its values are printed into the
#: generated source, and a CUDA kernel keeps them in constant memory (64 KiB in all).
MAX_TABLE_BYTES = 16384


class Tables:
    """The module-level NumPy arrays a kernel reads by indexing them: constant tables such as LULESH's
    hourglass modes, printed into the generated code as constants (no argument, no shadow, never active).

    A table's values are taken (copied, read-only) the first time a variant of the kernel is compiled with
    it; a later variant that finds other values under its name is refused, since the primal and its
    derivatives would then compute with different tables.
    """

    def __init__(self) -> None:
        self.values: dict[str, np.ndarray] = {}  # IR name -> the values taken
        self._names: dict[str, str] = {}  # "module.NAME" -> IR name

    def take(self, src: Source, node: ast.expr, name: str, value: np.ndarray) -> str:
        """The IR name of global array ``name`` (``value``), checked and taken on first use."""
        where = f"{src.fn.__module__}.{name}"
        if value.dtype.kind not in "biuf" or value.ndim == 0:
            raise src.error(
                node,
                f"the global {name!r} is a {value.ndim}-d array of {value.dtype}, not a table of numbers",
                "kernels read module-level arrays of bool, int or float (one dimension or more) by indexing them",
            )
        if value.nbytes > MAX_TABLE_BYTES:
            raise src.error(
                node,
                f"the global array {name!r} holds {value.nbytes} bytes, more than a constant table's "
                f"{MAX_TABLE_BYTES}",
                "pass it as a kernel argument",
            )
        ir_name = self._names.get(where)
        if ir_name is None:
            ir_name = constant(name)
            while ir_name in self.values:  # the same name in another module
                ir_name += "_"
            self._names[where] = ir_name
            self.values[ir_name] = taken = value.copy()
            taken.flags.writeable = False
            return ir_name
        taken = self.values[ir_name]
        if taken.dtype != value.dtype or taken.shape != value.shape or not np.array_equal(taken, value):
            raise src.error(
                node,
                f"the global array {where} has changed since this kernel was first compiled with it (a "
                "kernel takes a table's values when it first compiles)",
                "leave constant tables unchanged, or pass the array as a kernel argument",
            )
        return ir_name


# ---------------------------------------------------------------------------------------------- lowering
@dataclass
class Scope:
    """What names mean inside one function body (the kernel or one inlined helper call)."""

    src: Source
    prefix: str
    scalars: dict[str, str] = field(default_factory=dict)
    arrays: dict[str, str] = field(default_factory=dict)
    tuples: dict[str, list[Expr]] = field(default_factory=dict)


class Lowering:
    """Lowers one kernel (with its helpers inlined) to IR statements."""

    def __init__(
        self, namer: Namer, kinds: dict[str, Kind], tables: Tables, target: str, depth: int = 0
    ) -> None:
        self.namer = namer
        self.kinds = kinds  # IR name -> kind, for arrays, tuples and typed scalars the lowering introduces
        self.tables = tables
        self.target = target  # "cpu" or "cuda": which body of a helper with a CUDA body of its own to inline
        self.depth = depth

    # -- scopes ----------------------------------------------------------------------------------------
    def var(self, scope: Scope, name: str) -> str:
        """The IR name of user variable ``name`` (created on first assignment)."""
        if name not in scope.scalars:
            base = f"_u{name}" if name.startswith("_") else name
            scope.scalars[name] = f"{scope.prefix}{base}"
        return scope.scalars[name]

    def temp(self, stem: str = "t") -> str:
        return self.namer.fresh(stem)

    # -- expressions -----------------------------------------------------------------------------------
    def expr(self, scope: Scope, node: ast.expr, out: list[Stmt]) -> Expr:
        """Lower an expression to an atom (``Name`` or ``Lit``), appending the statements it needs."""
        src = scope.src
        line = src.line(node)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (bool, int, float)):
                return Lit(node.value)
            raise src.error(
                node, f"the constant {node.value!r} is not a number", "kernels compute with numbers"
            )
        if isinstance(node, ast.Name):
            return self.name(scope, node)
        if isinstance(node, ast.BinOp):
            op = _AUGOPS.get(type(node.op))
            if op is None:
                raise src.error(node, "matrix multiplication (@) is not supported", "multiply in a loop")
            a = self.expr(scope, node.left, out)
            b = self.expr(scope, node.right, out)
            return self.emit(out, Call(op, (a, b)), line)
        if isinstance(node, ast.UnaryOp):
            a = self.expr(scope, node.operand, out)
            if isinstance(node.op, ast.USub):
                return self.emit(out, Call("neg", (a,)), line)
            if isinstance(node.op, ast.UAdd):
                return a
            if isinstance(node.op, ast.Not):
                return self.emit(out, Call("not", (a,)), line)
            return self.emit(out, Call("invert", (a,)), line)
        if isinstance(node, ast.Compare):
            return self.compare(scope, node, out)
        if isinstance(node, ast.BoolOp):
            return self.boolop(scope, node, out)
        if isinstance(node, ast.IfExp):
            cond = self.expr(scope, node.test, out)
            result = self.temp()
            body: list[Stmt] = []
            orelse: list[Stmt] = []
            body.append(Assign(result, Call("copy", (self.expr(scope, node.body, body),)), line=line))
            orelse.append(Assign(result, Call("copy", (self.expr(scope, node.orelse, orelse),)), line=line))
            out.append(If(cond, body, orelse, line=line))
            return Name(result)
        if isinstance(node, ast.Call):
            values = self.call(scope, node, out)
            if len(values) != 1:
                raise src.error(
                    node, "a helper returning a tuple is used as a single value", "unpack it: a, b = f(...)"
                )
            return values[0]
        if isinstance(node, ast.Subscript):
            return self.subscript(scope, node, out)
        if isinstance(node, ast.Attribute):
            value = self.attribute(scope, node)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return Lit(value)
            raise src.error(node, f"the attribute {ast.unparse(node)} is not a number")
        if isinstance(node, ast.Tuple):
            raise src.error(
                node, "a tuple is used as a value here", "tuples can be assigned, unpacked or returned"
            )
        what, instead = _UNSUPPORTED.get(type(node), (f"the expression {ast.unparse(node)}", ""))
        raise src.error(node, f"{what} is not supported in kernels", instead)

    def emit(self, out: list[Stmt], value: Expr, line: Line) -> Name:
        t = self.temp()
        out.append(Assign(t, value, line=line))
        return Name(t)

    def name(self, scope: Scope, node: ast.Name) -> Expr:
        n = node.id
        if n in scope.scalars:
            return Name(scope.scalars[n])
        if n in scope.arrays or n in scope.tuples:
            raise scope.src.error(node, f"the array or tuple {n!r} is used as a scalar", "index it")
        value = scope.src.env.get(
            n, getattr(__builtins__, n, None) if not isinstance(__builtins__, dict) else __builtins__.get(n)
        )
        if isinstance(value, np.ndarray):
            raise scope.src.error(node, f"the array {n!r} is used as a scalar", "index it")
        if isinstance(value, (bool, int, float, np.integer, np.floating)):
            # float32 and float64 constants keep their type (Python floats are weak: analysis.WEAK); other
            # NumPy scalars become Python numbers.
            if isinstance(value, (np.float32, np.float64)) or not isinstance(value, np.generic):
                return Lit(value)
            return Lit(value.item())
        raise scope.src.error(
            node,
            f"the name {n!r} is not a local variable, a parameter or a numeric global",
            "pass it as a kernel argument",
        )

    def attribute(self, scope: Scope, node: ast.Attribute) -> Any:
        """Resolve ``module.attr`` chains such as ``math.pi`` or ``np.float32`` in the function's globals."""
        parts: list[str] = []
        base: ast.expr = node
        while isinstance(base, ast.Attribute):
            parts.append(base.attr)
            base = base.value
        if not isinstance(base, ast.Name) or base.id in scope.scalars or base.id in scope.arrays:
            raise scope.src.error(
                node,
                f"the attribute access {ast.unparse(node)} is not supported",
                "kernels read arrays element by element, and their sizes as a.shape[k]",
            )
        obj = scope.src.env.get(base.id)
        for p in reversed(parts):
            obj = getattr(obj, p, None)
        if obj is None:
            raise scope.src.error(node, f"{ast.unparse(node)} cannot be resolved")
        return obj

    def compare(self, scope: Scope, node: ast.Compare, out: list[Stmt]) -> Expr:
        line = scope.src.line(node)
        left = self.expr(scope, node.left, out)
        result: Expr | None = None
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            name = _CMPOPS.get(type(op))
            if name is None:
                raise scope.src.error(
                    node,
                    f"the comparison `{'is' if isinstance(op, (ast.Is, ast.IsNot)) else 'in'}` is not supported",
                    "compare numbers with < <= > >= == !=",
                )
            right = self.expr(scope, right_node, out)
            c = self.emit(out, Call(name, (left, right)), line)
            result = c if result is None else self.emit(out, Call("and", (result, c)), line)
            left = right
        assert result is not None
        return result

    def boolop(self, scope: Scope, node: ast.BoolOp, out: list[Stmt]) -> Expr:
        """``a and b`` / ``a or b`` with short-circuit evaluation (``b`` may index out of range otherwise)."""
        line = scope.src.line(node)
        result = self.temp()
        first = self.expr(scope, node.values[0], out)
        out.append(Assign(result, Call("bool", (first,)), line=line))
        for value in node.values[1:]:
            rest: list[Stmt] = []
            v = self.expr(scope, value, rest)
            rest.append(Assign(result, Call("bool", (v,)), line=line))
            if isinstance(node.op, ast.And):
                out.append(If(Name(result), rest, [], line=line))
            else:
                out.append(If(Name(result), [], rest, line=line))
        return Name(result)

    def subscript(self, scope: Scope, node: ast.Subscript, out: list[Stmt]) -> Expr:
        value = node.value
        line = scope.src.line(node)
        if isinstance(value, ast.Attribute) and value.attr == "shape" and isinstance(value.value, ast.Name):
            array = self.array_arg(scope, value.value)
            try:
                axis = self.constant_int(scope, node.slice)
            except KernelSyntaxError:
                raise scope.src.error(
                    node,
                    f"the axis of {ast.unparse(node)} is not an integer constant",
                    "write a.shape[0], ...",
                ) from None
            ndim = self._array_kind(array).ndim
            if not 0 <= axis < ndim:
                raise scope.src.error(
                    node,
                    f"{ast.unparse(node)}: axis {axis} of an array of {ndim} dimension(s)",
                    "index 0 to ndim-1",
                )
            return self.emit(out, Call("shape", (Name(array), Lit(axis))), line)
        base, index = self.element(scope, node, out)
        if base in scope.tuples:
            return self.tuple_item(scope, node, base, index, out)
        return self.emit(out, Elem(base, index), line)

    def tuple_item(self, scope: Scope, node: ast.AST, name: str, index: Expr, out: list[Stmt]) -> Expr:
        """Item ``index`` of tuple ``name``: the item itself for a constant, else a chain of branches."""
        items = scope.tuples[name]
        n = len(items)
        if isinstance(index, Lit):
            if not -n <= int(index.value) < n:
                raise scope.src.error(
                    node, f"index {index.value} is out of range for the tuple {name!r} of {n} items"
                )
            return items[int(index.value)]
        line = scope.src.line(node)
        k = self.emit(
            out, Call("tindex", (index, Lit(n))), line
        )  # Python's negative indices; checked by PAD_DEBUG
        result = self.temp()
        chain: list[Stmt] = [Assign(result, Call("copy", (items[-1],)), line=line)]
        for j in range(n - 2, -1, -1):
            test: list[Stmt] = []
            c = self.emit(test, Call("eq", (k, Lit(j))), line)
            chain = [*test, If(c, [Assign(result, Call("copy", (items[j],)), line=line)], chain, line=line)]
        out.extend(chain)
        return Name(result)

    def array_named(self, scope: Scope, node: ast.Name) -> str | None:
        """The IR name of the array ``node`` names: an argument, a local array, or a module-level NumPy array
        (a constant table, ``Tables``); None if it names no array."""
        if node.id in scope.arrays:
            return scope.arrays[node.id]
        if node.id in scope.scalars or node.id in scope.tuples:
            return None
        value = scope.src.env.get(node.id)
        if not isinstance(value, np.ndarray):
            return None
        ir_name = self.tables.take(scope.src, node, node.id, value)
        self.kinds[ir_name] = ArrayKind(value.dtype, value.ndim)
        return ir_name

    def writable(self, scope: Scope, node: ast.AST, array: str) -> None:
        """Refuse a store into a tuple or a constant table."""
        if array in scope.tuples:
            raise scope.src.error(node, "tuples are immutable", "build a new tuple")
        if array in self.tables.values:
            raise scope.src.error(
                node,
                f"{ast.unparse(node)} writes into a module-level array, which kernels read as a constant table",
                "pass the array as a kernel argument to write into it",
            )

    def _array_kind(self, array: str) -> ArrayKind:
        kind = self.kinds[array]
        assert isinstance(kind, ArrayKind)
        return kind

    def element(self, scope: Scope, node: ast.Subscript, out: list[Stmt]) -> tuple[str, Any]:
        """Resolve ``a[i][j]`` / ``a[i, j]`` to (IR array name, index atoms), or a tuple and its index atom."""
        indices: list[ast.expr] = []
        base: ast.expr = node
        while isinstance(base, ast.Subscript):
            sl = base.slice
            indices[:0] = list(sl.elts) if isinstance(sl, ast.Tuple) else [sl]
            base = base.value
        if not isinstance(base, ast.Name):
            what, instead = _UNSUPPORTED.get(
                type(base), (f"indexing {ast.unparse(base)}", "index arrays by name")
            )
            raise scope.src.error(node, f"{what} is not supported in kernels", instead)
        for ix in indices:
            if isinstance(ix, ast.Slice):
                raise scope.src.error(
                    node, "slices are not supported in kernels", "index single elements in a loop"
                )
        if base.id in scope.tuples:
            if len(indices) != 1:
                raise scope.src.error(
                    node, f"the tuple {base.id!r} is indexed with {len(indices)} indices", "index it with one"
                )
            return base.id, self.expr(scope, indices[0], out)
        array = self.array_named(scope, base)
        if array is None:
            raise scope.src.error(
                node, f"{base.id!r} is not an array", "only arrays and tuples can be indexed"
            )
        kind = self._array_kind(array)
        if len(indices) != kind.ndim:
            raise scope.src.error(
                node,
                f"{base.id!r} has {kind.ndim} dimensions but is indexed with {len(indices)}",
                "index every dimension",
            )
        return array, tuple(self.expr(scope, ix, out) for ix in indices)

    # -- calls -----------------------------------------------------------------------------------------
    def call(self, scope: Scope, node: ast.Call, out: list[Stmt]) -> list[Expr]:
        src = scope.src
        line = src.line(node)
        shown = ast.unparse(node.func)
        for a in node.args:
            if isinstance(a, ast.Starred):
                raise src.error(
                    node, f"{shown}(*{ast.unparse(a.value)}) unpacks arguments", "pass them one by one"
                )
        fn_name, called = self.callee(scope, node)
        if _is_helper(called):
            return self.inline(scope, called.on(self.target), node, out)
        if fn_name is None:
            raise src.error(
                node,
                f"the call {shown}(...) is not supported in kernels",
                "kernels call math/numpy scalar functions and @pad.func helpers (docs/kernels.md lists them)",
            )
        if node.keywords:
            given = ", ".join(f"{k.arg}=" if k.arg else "**" for k in node.keywords)
            raise src.error(
                node,
                f"{shown}() takes no keyword arguments in kernels, {given} given",
                "pass arguments by position",
            )
        if fn_name == "len":
            if len(node.args) != 1:
                raise src.error(node, f"len() takes 1 argument (an array), {len(node.args)} given")
            array = self.array_arg(scope, node.args[0])
            return [self.emit(out, Call("shape", (Name(array), Lit(0))), line)]
        args = [self.expr(scope, arg, out) for arg in node.args]
        nary = called in (min, max)
        rule = RULES[fn_name]
        if len(node.args) != rule.arity and not (nary and len(node.args) >= 2):
            expected = f"{'at least ' if nary else ''}{rule.arity} argument{'s' * (rule.arity != 1)}"
            raise src.error(
                node,
                f"{shown}() takes {expected} ({', '.join(rule.params)}), {len(node.args)} given",
                "see docs/kernels.md for the functions kernels call",
            )
        acc = self.emit(out, Call(fn_name, tuple(args[:2])), line)
        for more in args[2:]:  # min/max of more than two
            acc = self.emit(out, Call(fn_name, (acc, more)), line)
        return [acc]

    def array_arg(self, scope: Scope, node: ast.expr) -> str:
        array = self.array_named(scope, node) if isinstance(node, ast.Name) else None
        if array is not None:
            return array
        raise scope.src.error(node, f"{ast.unparse(node)} is not an array")

    def callee(self, scope: Scope, node: ast.Call) -> tuple[str | None, Any]:
        """The rule a call maps to (``"helper"`` or ``"len"`` for those), and the called object."""
        func = node.func
        if isinstance(func, ast.Name):
            if func.id in scope.scalars or func.id in scope.arrays or func.id in scope.tuples:
                raise scope.src.error(node, f"{func.id!r} is a variable, not a function")
            obj = scope.src.env.get(func.id, getattr(builtins, func.id, None))
        elif isinstance(func, ast.Attribute):
            obj = self.attribute(scope, func)
        else:
            raise scope.src.error(node, f"{ast.unparse(func)} cannot be called", "call functions by name")
        name = getattr(obj, "__name__", "")
        if _is_helper(obj):
            return "helper", obj
        if _is_local_array(obj):
            raise scope.src.error(
                node, "pad.local_array(...) must be assigned to a name", "write a = pad.local_array(shape)"
            )
        if obj is len:
            return "len", obj
        if isinstance(obj, types.BuiltinFunctionType) and obj.__module__ == "math":
            return MATH.get(name), obj
        if getattr(builtins, name, None) is obj:
            return BUILTINS.get(name), obj
        if isinstance(obj, (np.ufunc, type)) or (
            callable(obj) and getattr(obj, "__module__", "").startswith("numpy")
        ):
            return NUMPY.get(name), obj
        return None, obj

    def inline(self, scope: Scope, helper: Any, node: ast.Call, out: list[Stmt]) -> list[Expr]:
        """Inline a ``@pad.func`` call: bind its parameters, lower its body, and return its result atoms."""
        if self.depth > 32:
            raise scope.src.error(node, f"helper {helper.__name__} recurses", "helpers cannot be recursive")
        src = Source.of(helper.py_func)
        signature = inspect.signature(helper.py_func)
        if any(
            p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in signature.parameters.values()
        ):
            raise src.error(
                src.tree, "helpers take named parameters only (no *args, **kwargs or keyword-only)"
            )
        try:
            bound = signature.bind(*node.args, **{k.arg or "**": k.value for k in node.keywords})
        except TypeError as exc:
            raise scope.src.error(node, f"{helper.__name__}{signature}: {exc}") from None
        inner = Scope(src, self.namer.fresh(helper.__name__) + "_")
        line = scope.src.line(node)
        for p, param in signature.parameters.items():
            a = bound.arguments.get(p)
            if a is None:  # a default: a number
                if not isinstance(param.default, (bool, int, float)):
                    raise src.error(src.tree, f"the default of {p!r} is not a number")
                out.append(Assign(self.var(inner, p), Call("copy", (Lit(param.default),)), line=line))
            elif isinstance(a, ast.Name) and a.id in scope.arrays:
                inner.arrays[p] = scope.arrays[a.id]
            elif isinstance(a, ast.Name) and a.id in scope.tuples:
                inner.tuples[p] = list(scope.tuples[a.id])
            elif isinstance(a, ast.Tuple):
                inner.tuples[p] = [self.expr(scope, e, out) for e in a.elts]
            else:
                value = self.expr(scope, a, out)
                out.append(Assign(self.var(inner, p), Call("copy", (value,)), line=line))
        body: list[Stmt] = []
        sub = Lowering(self.namer, self.kinds, self.tables, self.target, self.depth + 1)
        results = sub.function_body(inner, body)
        out.extend(body)
        return results

    # -- statements ------------------------------------------------------------------------------------
    def function_body(self, scope: Scope, out: list[Stmt]) -> list[Expr]:
        """Lower a helper's body; returns its result atoms (``return`` becomes assignments plus a flag)."""
        tree = scope.src.tree
        returns = [n for n in ast.walk(tree) if isinstance(n, ast.Return)]
        arity = {
            len(n.value.elts) if isinstance(n.value, ast.Tuple) else (0 if n.value is None else 1)
            for n in returns
        }
        if len(arity) > 1:
            raise scope.src.error(
                tree, "returns values of different shapes", "return the same number of values everywhere"
            )
        count = arity.pop() if arity else 0
        results = [Name(f"{scope.prefix}ret{k}") for k in range(count)]
        body = self.block(scope, tree.body)
        out.extend(normalize(body, results, self.namer))
        return list(results)

    def block(self, scope: Scope, nodes: list[ast.stmt]) -> list[Stmt]:
        out: list[Stmt] = []
        for node in nodes:
            self.stmt(scope, node, out)
        return out

    def stmt(self, scope: Scope, node: ast.stmt, out: list[Stmt]) -> None:
        src = scope.src
        line = src.line(node)
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is None:
                return
            if len(targets) > 1:
                value = self.expr(scope, node.value, out)
                for t in targets:
                    self.assign(scope, t, [value], out, line)
                return
            self.assign_from(scope, targets[0], node.value, out, line)
        elif isinstance(node, ast.AugAssign):
            self.augassign(scope, node, out)
        elif isinstance(node, ast.If):
            cond = self.expr(scope, node.test, out)
            out.append(If(cond, self.block(scope, node.body), self.block(scope, node.orelse), line=line))
        elif isinstance(node, ast.For):
            self.for_loop(scope, node, out)
        elif isinstance(node, ast.While):
            if node.orelse:
                raise src.error(node, "while ... else is not supported", "use a flag")
            test: list[Stmt] = []
            cond = self.expr(scope, node.test, test)
            out.append(While(test, cond, self.block(scope, node.body), line=line))
        elif isinstance(node, ast.Break):
            out.append(Break(line=line))
        elif isinstance(node, ast.Continue):
            out.append(Continue(line=line))
        elif isinstance(node, ast.Return):
            values: list[Expr] = []
            if node.value is not None:
                elts = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                for e in elts:
                    if isinstance(e, ast.Name) and e.id in scope.tuples:
                        raise src.error(
                            node,
                            "returning a tuple variable is not supported",
                            "return its items: return t[0], t[1]",
                        )
                    values.append(self.expr(scope, e, out))
            out.append(Return(values, line=line))
        elif isinstance(node, ast.Expr):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return  # docstring
            if isinstance(node.value, ast.Call):
                self.call(scope, node.value, out)
                return
            raise src.error(node, "an expression statement has no effect", "assign its value or remove it")
        elif isinstance(node, ast.Pass):
            return
        else:
            what, instead = _UNSUPPORTED.get(type(node), (f"the statement {ast.unparse(node)!r}", ""))
            raise src.error(
                node,
                f"{what} is not supported in kernels",
                instead or "kernels use assignments, if, for, while, break, continue and return",
            )

    def assign_from(
        self, scope: Scope, target: ast.expr, value: ast.expr, out: list[Stmt], line: Line
    ) -> None:
        src = scope.src
        if isinstance(value, ast.Call) and _is_local_array(self.callee_object(scope, value)):
            if not isinstance(target, ast.Name):
                raise src.error(value, "pad.local_array(...) must be assigned to a name")
            self.local_array(scope, target.id, value, out, line)
            return
        if isinstance(value, ast.Tuple):
            atoms = [self.expr(scope, e, out) for e in value.elts]
        elif isinstance(value, ast.Name) and value.id in scope.tuples:
            atoms = list(scope.tuples[value.id])
        elif isinstance(value, ast.Name) and value.id in scope.arrays:
            if not isinstance(target, ast.Name):
                raise src.error(value, "arrays can only be aliased by name")
            scope.arrays[target.id] = scope.arrays[value.id]
            return
        elif isinstance(value, ast.Call):
            atoms = self.call(scope, value, out)
        else:
            atoms = [self.expr(scope, value, out)]
        self.assign(scope, target, atoms, out, line)

    def callee_object(self, scope: Scope, node: ast.Call) -> Any:
        func = node.func
        if isinstance(func, ast.Name):
            return scope.src.env.get(func.id)
        if isinstance(func, ast.Attribute):
            try:
                return self.attribute(scope, func)
            except KernelSyntaxError:
                return None
        return None

    def assign(self, scope: Scope, target: ast.expr, atoms: list[Expr], out: list[Stmt], line: Line) -> None:
        src = scope.src
        if isinstance(target, ast.Name):
            if target.id in scope.arrays:
                raise src.error(target, f"the array {target.id!r} cannot be reassigned", "write its elements")
            if len(atoms) == 1 and target.id not in scope.tuples:
                name = self.var(scope, target.id)
                if name == self.launch_index:
                    raise src.error(
                        target, "the launch index cannot be reassigned", "copy it to another variable"
                    )
                out.append(Assign(name, Call("copy", (atoms[0],)), line=line))
            else:
                names = [f"{self.var(scope, target.id)}_{k}" for k in range(len(atoms))]
                for n, a in zip(names, atoms, strict=True):
                    out.append(Assign(n, Call("copy", (a,)), line=line))
                scope.tuples[target.id] = [Name(n) for n in names]
        elif isinstance(target, ast.Tuple):
            if len(target.elts) != len(atoms):
                raise src.error(target, f"cannot unpack {len(atoms)} values into {len(target.elts)} names")
            # Read every value before writing any target: `a, b = b, a` swaps.
            temps = []
            for a in atoms:
                t = self.temp()
                out.append(Assign(t, Call("copy", (a,)), line=line))
                temps.append(Name(t))
            for t_node, a in zip(target.elts, temps, strict=True):
                self.assign(scope, t_node, [a], out, line)
        elif isinstance(target, ast.Subscript):
            if len(atoms) != 1:
                raise src.error(target, "cannot store a tuple into an array element")
            array, index = self.element(scope, target, out)
            self.writable(scope, target, array)
            out.append(Store(array, index, atoms[0], line=line))
        else:
            raise src.error(target, f"cannot assign to {ast.unparse(target)}")

    def augassign(self, scope: Scope, node: ast.AugAssign, out: list[Stmt]) -> None:
        src = scope.src
        line = src.line(node)
        op = _AUGOPS.get(type(node.op))
        if op is None:
            raise src.error(node, "matrix multiplication (@=) is not supported", "multiply in a loop")
        value = self.expr(scope, node.value, out)
        if isinstance(node.target, ast.Name):
            if node.target.id not in scope.scalars:
                raise src.error(node, f"{node.target.id!r} is updated before it is assigned")
            name = self.var(scope, node.target.id)
            if name == self.launch_index:
                raise src.error(node, "the launch index cannot be reassigned", "copy it to another variable")
            t = self.emit(out, Call(op, (Name(name), value)), line)
            out.append(Assign(name, Call("copy", (t,)), line=line))
        elif isinstance(node.target, ast.Subscript):
            array, index = self.element(scope, node.target, out)
            self.writable(scope, node, array)
            if op in ("add", "sub"):
                v = value if op == "add" else self.emit(out, Call("neg", (value,)), line)
                out.append(Store(array, index, v, accumulate=True, line=line))
            else:
                old = self.emit(out, Elem(array, index), line)
                new = self.emit(out, Call(op, (old, value)), line)
                out.append(Store(array, index, new, line=line))
        else:
            raise src.error(node, f"cannot update {ast.unparse(node.target)}")

    def for_loop(self, scope: Scope, node: ast.For, out: list[Stmt]) -> None:
        src = scope.src
        line = src.line(node)
        it = node.iter
        if node.orelse:
            raise src.error(node, "for ... else is not supported", "use a flag")
        call = it.func.id if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) else None
        if call in ("enumerate", "zip") or (
            isinstance(it, ast.Name) and (it.id in scope.arrays or it.id in scope.tuples)
        ):
            self.for_each(scope, node, out)
            return
        if not isinstance(it, ast.Call) or call != "range" or it.keywords:
            raise src.error(
                node,
                f"a loop over {ast.unparse(it)} is not supported",
                "loop over range(...), a 1-D array, a tuple, or enumerate/zip of those",
            )
        if not isinstance(node.target, ast.Name):
            raise src.error(node, "the loop variable must be a single name")
        bounds = [self.expr(scope, a, out) for a in it.args]
        if not 1 <= len(bounds) <= 3:
            raise src.error(node, "range takes 1 to 3 arguments")
        start, stop, step = (Lit(0), bounds[0], Lit(1)) if len(bounds) == 1 else (*bounds, Lit(1))[:3]
        if isinstance(step, Lit) and step.value == 0:
            raise src.error(node, "range() step must not be zero")
        # Bounds are evaluated once, before the loop: keep them in temporaries the body cannot change.
        fixed = []
        for b in (start, stop, step):
            if isinstance(b, Name):
                t = self.temp("r")
                out.append(Assign(t, Call("copy", (b,)), line=line))
                b = Name(t)
            fixed.append(b)
        var = self.var(scope, node.target.id)
        out.append(For(var, fixed[0], fixed[1], fixed[2], self.block(scope, node.body), line=line))

    def for_each(self, scope: Scope, node: ast.For, out: list[Stmt]) -> None:
        """``for v in a``, ``for k, v in enumerate(a)``, ``for u, v in zip(a, b)`` over 1-D arrays and tuples:
        a loop over the index, with the items read at the top of the body."""
        src, it, line = scope.src, node.iter, scope.src.line(node)
        counted = isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate"
        if isinstance(it, ast.Call):
            if it.keywords or not it.args or (counted and len(it.args) != 1):
                raise src.error(
                    node, f"{ast.unparse(it)}: takes {'one sequence' if counted else 'sequences'} by position"
                )
            sequences = it.args
        else:
            sequences = [it]
        targets = [node.target] if sequences == [it] else None
        if targets is None:
            wanted = len(sequences) + counted
            if not (isinstance(node.target, ast.Tuple) and len(node.target.elts) == wanted):
                raise src.error(node, f"the loop over {ast.unparse(it)} needs {wanted} loop variables")
            targets = list(node.target.elts)
        k = self.temp("k")
        lengths: list[Expr] = []
        for seq in sequences:
            if isinstance(seq, ast.Name) and seq.id in scope.tuples:
                lengths.append(Lit(len(scope.tuples[seq.id])))
            elif isinstance(seq, ast.Name) and seq.id in scope.arrays:
                array = scope.arrays[seq.id]
                if self._array_kind(array).ndim != 1:
                    raise src.error(
                        node,
                        f"a loop over the rows of {seq.id!r} is not supported",
                        f"loop over range({seq.id}.shape[0])",
                    )
                lengths.append(self.emit(out, Call("shape", (Name(array), Lit(0))), line))
            else:
                raise src.error(
                    node,
                    f"a loop over {ast.unparse(seq)} is not supported",
                    "loop over arrays or tuples by name",
                )
        stop = lengths[0]
        for n in lengths[1:]:
            stop = self.emit(out, Call("min", (stop, n)), line)
        body: list[Stmt] = []
        if counted:
            self.assign(scope, targets.pop(0), [Name(k)], body, line)
        for seq, target in zip(sequences, targets, strict=True):
            assert isinstance(seq, ast.Name)
            if seq.id in scope.tuples:
                item = self.tuple_item(scope, node, seq.id, Name(k), body)
            else:
                item = self.emit(body, Elem(scope.arrays[seq.id], (Name(k),)), line)
            self.assign(scope, target, [item], body, line)
        body += self.block(scope, node.body)
        if isinstance(stop, Name):
            t = self.temp("r")
            out.append(Assign(t, Call("copy", (stop,)), line=line))
            stop = Name(t)
        out.append(For(k, Lit(0), stop, Lit(1), body, line=line))

    def local_array(self, scope: Scope, name: str, node: ast.Call, out: list[Stmt], line: Line) -> None:
        src = scope.src
        if (
            not node.args
            or len(node.args) > 2
            or (node.keywords and [k.arg for k in node.keywords] != ["dtype"])
        ):
            raise src.error(node, "pad.local_array takes (shape, dtype=np.float64)")
        shape_node = node.args[0]
        elts = shape_node.elts if isinstance(shape_node, ast.Tuple) else [shape_node]
        shape = []
        for e in elts:
            try:
                value = self.constant_int(scope, e)
            except KernelSyntaxError:
                raise src.error(
                    node, "pad.local_array needs a shape of integer constants", "e.g. pad.local_array((3, 8))"
                ) from None
            shape.append(value)
        dtype_node = (
            node.args[1] if len(node.args) > 1 else (node.keywords[0].value if node.keywords else None)
        )
        dtype = np.dtype(np.float64)
        if dtype_node is not None:
            obj = (
                self.attribute(scope, dtype_node)
                if isinstance(dtype_node, ast.Attribute)
                else scope.src.env.get(getattr(dtype_node, "id", ""))
            )
            try:
                dtype = np.dtype(obj)
            except TypeError:
                raise src.error(node, f"{ast.unparse(dtype_node)} is not a dtype") from None
        ir_name = self.var(scope, name)
        scope.scalars.pop(name, None)
        scope.arrays[name] = ir_name
        self.kinds[ir_name] = ArrayKind(dtype, len(shape), local=True)
        out.append(LocalArray(ir_name, tuple(shape), dtype, line=line))

    def constant_int(self, scope: Scope, node: ast.expr) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            value = scope.src.env.get(node.id)
            if isinstance(value, (int, np.integer)) and node.id not in scope.scalars:
                return int(value)
        if isinstance(node, ast.BinOp):
            a, b = self.constant_int(scope, node.left), self.constant_int(scope, node.right)
            ops: dict[type, Callable[[int, int], int]] = {
                ast.Add: int.__add__,
                ast.Mult: int.__mul__,
                ast.Sub: int.__sub__,
            }
            if type(node.op) in ops:
                return ops[type(node.op)](a, b)
        raise scope.src.error(node, "not an integer constant")

    launch_index = ""


@dataclass
class Lowered:
    """A kernel lowered for one signature: IR parameter names (launch index first), body, kinds, namer."""

    params: list[str]
    body: list[Stmt]
    kinds: dict[str, Kind]
    namer: Namer
    filename: str
    tables: dict[str, np.ndarray]  # IR name -> values of the constant tables read


def lower_kernel(
    fn: Callable[..., Any], kinds: list[Kind], tables: Tables | None = None, target: str = "cpu"
) -> Lowered:
    """Lower kernel ``fn`` for arguments of ``kinds`` and ``target``; ``tables``: the kernel's constant
    tables, taken by its variants compiled before."""
    src = Source.of(fn)
    tree = src.tree
    params = [a.arg for a in tree.args.args]
    if tree.args.vararg or tree.args.kwarg or tree.args.kwonlyargs or tree.args.defaults:
        raise src.error(tree, "kernels take plain positional parameters only")
    if len(params) != len(kinds) + 1:
        raise TypeError(
            f"kernel {fn.__name__} takes {len(params) - 1} arguments after the launch index, got {len(kinds)}"
        )
    namer = Namer()
    all_kinds: dict[str, Kind] = {}
    tables = tables if tables is not None else Tables()
    low = Lowering(namer, all_kinds, tables, target)
    scope = Scope(src, "")
    low.launch_index = low.var(scope, params[0])
    all_kinds[low.launch_index] = "i"
    body: list[Stmt] = []
    ir_params = [low.launch_index]
    for p, kind in zip(params[1:], kinds, strict=True):
        ir = low.var(scope, p)
        ir_params.append(ir)
        if isinstance(kind, ArrayKind):
            del scope.scalars[p]
            scope.arrays[p] = ir
            all_kinds[ir] = kind
        elif isinstance(kind, TupleKind):
            del scope.scalars[p]
            all_kinds[ir] = kind
            items = [Name(f"{ir}_{k}") for k in range(len(kind.items))]
            scope.tuples[p] = list(items)
            for k, (item, ty) in enumerate(zip(items, kind.items, strict=True)):
                all_kinds[item.id] = ty
                body.append(Assign(item.id, Call("item", (Name(ir), Lit(k))), line=src.line(tree)))
        else:
            all_kinds[ir] = kind
    returns = [n for n in ast.walk(tree) if isinstance(n, ast.Return)]
    if any(r.value is not None for r in returns):
        raise src.error(
            next(r for r in returns if r.value is not None),
            "kernels cannot return a value",
            "store results into an output array",
        )
    body.extend(low.block(scope, tree.body))
    read = {n: v for n, v in tables.values.items() if n in all_kinds}
    return Lowered(ir_params, normalize(body, [], namer), all_kinds, namer, src.filename, read)


def kind_of_value(value: Any, what: str) -> Kind:
    """The kernel-argument kind of a Python value (arrays, scalars, tuples of scalars)."""
    if hasattr(value, "dtype") and hasattr(value, "shape") and getattr(value, "ndim", 0) > 0:
        return ArrayKind(np.dtype(value.dtype), value.ndim)
    if isinstance(value, (bool, np.bool_)):
        return "b"
    if isinstance(value, (int, np.integer)):
        return "i"
    if isinstance(value, np.float32):
        return "f4"
    if isinstance(value, (float, np.floating)):
        return "f8"
    if isinstance(value, tuple):
        return TupleKind(tuple(_scalar_kind(v, what) for v in value))
    raise TypeError(f"{what}: kernels take arrays, numbers and tuples of numbers, not {type(value).__name__}")


def _scalar_kind(v: Any, what: str) -> str:
    k = kind_of_value(v, what)
    if not isinstance(k, str):
        raise TypeError(f"{what}: tuples passed to kernels must hold numbers only")
    return k


__all__ = ["ArrayKind", "KernelSyntaxError", "Tables", "TupleKind", "kind_of_value", "lower_kernel"]
