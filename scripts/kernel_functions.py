"""Render docs/kernels.md's table of the functions kernels call from the rule table (pad/kernel/rules.py).

``python -m scripts.kernel_functions`` rewrites the region between ``<!-- kernel-functions -->`` and
``<!-- /kernel-functions -->``; ``--check`` changes nothing and exits 1 if the page differs (a unit test runs it).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from pad.kernel.ir import Call, Elem, Expr, Lit, Name
from pad.kernel.rules import BUILTINS, MATH, NUMPY, RULES

PAGE = Path(__file__).resolve().parent.parent / "docs" / "kernels.md"
REGION = re.compile(r"(<!-- kernel-functions -->\n).*?(<!-- /kernel-functions -->)", re.S)


def formula(e: Expr) -> str:
    """An expression of the rule table as Python, with ``[c]`` for 1 where ``c`` holds, else 0."""
    if isinstance(e, Name):
        return e.id
    if isinstance(e, Lit):
        return repr(float(e.value)) if e.typed and not isinstance(e.value, bool) else repr(e.value)
    assert not isinstance(e, Elem) and isinstance(e, Call)
    args = [formula(a) for a in e.args]
    if e.op == "indicator":
        return f"[{_bare(args[0])}]"
    template = RULES[e.op].template
    for k, a in enumerate(args):  # an argument of a call needs no parentheses of its own
        if re.search(rf"[(,] ?\{{{k}\}}[),]", template):
            args[k] = _bare(a)
    return template.format(*args)


def _bare(text: str) -> str:
    """``text`` without one pair of parentheses around all of it."""
    if not (text.startswith("(") and text.endswith(")")):
        return text
    depth = 0
    for k, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and k < len(text) - 1:
            return text
    return text[1:-1]


def rows() -> list[str]:
    """One row per rule that kernels call by name: the names, and each argument's partial derivative."""
    names: dict[str, list[str]] = {}
    for prefix, table in (("math.", MATH), ("np.", NUMPY), ("", BUILTINS)):
        for name, op in table.items():
            names.setdefault(op, []).append(prefix + name)
    out = ["| call | partial derivatives (`out` is the result) |", "|---|---|"]
    for op, rule in RULES.items():
        if op not in names:
            continue
        params = ", ".join(rule.params) + (", ..." if op in ("min", "max") else "")
        calls = ", ".join(f"`{n}({params})`" for n in names[op])
        if rule.partials is None:
            derivative = "none (piecewise constant or not a number)"
        else:
            partials = rule.partials(Name("out"), *(Name(p) for p in rule.params))
            derivative = "; ".join(
                f"∂/∂{p}: `{_bare(formula(d))}`"
                for p, d in zip(rule.params, partials, strict=True)
                if d is not None
            )
        out.append(f"| {calls} | {derivative} |")
    return out


def render(check: bool) -> int:
    text = PAGE.read_text()
    new = REGION.sub(lambda m: m[1] + "\n".join(rows()) + "\n" + m[2], text)
    if new == text:
        return 0
    if check:
        print(f"out of date: {PAGE}; run: python -m scripts.kernel_functions")
        return 1
    PAGE.write_text(new)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if the table is stale")
    return render(parser.parse_args().check)


if __name__ == "__main__":
    sys.exit(main())
