"""The house's layering: every ``pad`` module imports alone, imports point down the layers, and there are no
import circles (imports inside functions count: they are circles that wait for the first call)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Lowest first. A module may import modules of its own layer or of a lower one (CONTRIBUTING.md).
LAYERS = (
    ("pad.annotations", "pad.arrays"),  # Dup/Const/Active; the array libraries and the current device
    ("pad.kernel",),  # the kernel compiler: source in, generated source out
    ("pad.tape", "pad.replay"),  # the recorders: the tape of adjoints, the record of device work to replay
    ("pad.parallel", "pad.tasks", "pad.mpi", "pad.checkpoint", "pad.testing"),  # op families
    ("pad", "pad.demo"),  # the public face
)


def _module_names() -> dict[str, Path]:
    names = {}
    for path in sorted((ROOT / "pad").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


MODULES = _module_names()


def _imports(name: str, path: Path) -> set[str]:
    """The ``pad`` modules that ``name`` imports, anywhere in its source (``from pad.x import y`` counts as
    importing ``pad.x.y`` when that is a module, else ``pad.x``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(name: str) -> int:
    """The layer that names ``name`` or a subpackage of ``pad`` containing it (-1: none does)."""
    for i, layer in enumerate(LAYERS):
        if any(name == group or (group != "pad" and name.startswith(group + ".")) for group in layer):
            return i
    return -1


def test_every_module_has_a_layer() -> None:
    homeless = [name for name in MODULES if _layer(name) < 0]
    assert not homeless, f"add these modules to LAYERS (and to CONTRIBUTING.md's table): {homeless}"


def test_imports_point_down() -> None:
    upward = [
        f"{name} (layer {_layer(name)}) imports {dep} (layer {_layer(dep)})"
        for name, deps in sorted(GRAPH.items())
        for dep in sorted(deps)
        if _layer(dep) > _layer(name)
    ]
    assert not upward, "imports that point up:\n" + "\n".join(upward)


# The kernel compiler's pipeline: the parser (frontend) in front, the printer (emit) at the end, and the
# stages between, which take and give IR only: they know neither Python's syntax nor numba's.
PARSER, PRINTER = "pad.kernel.frontend", "pad.kernel.emit"
STAGES = tuple(
    f"pad.kernel.{m}"
    for m in ("ir", "names", "rules", "controlflow", "analysis", "races", "tangent", "reverse", "optimize")
)


def test_compiler_stages_import_neither_parser_nor_printer() -> None:
    def reach(name: str, seen: set[str]) -> set[str]:
        for dep in GRAPH[name] - seen:
            seen.add(dep)
            reach(dep, seen)
        return seen

    assert set(STAGES) <= set(MODULES)
    wrong = {stage: sorted(reach(stage, set()) & {PARSER, PRINTER}) for stage in STAGES}
    assert not any(wrong.values()), f"compiler stages that reach the parser or printer: {wrong}"


def test_no_import_circles() -> None:
    done: set[str] = set()
    path: list[str] = []

    def visit(name: str) -> None:
        if name in path:
            circle = [*path[path.index(name) :], name]
            pytest.fail("import circle: " + " -> ".join(circle))
        if name in done:
            return
        path.append(name)
        for dep in sorted(GRAPH[name]):
            visit(dep)
        path.pop()
        done.add(name)

    for name in sorted(GRAPH):
        visit(name)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_alone(name: str) -> None:
    """Each module imports first in a fresh interpreter (``pad.mpi`` starts MPI on one rank)."""
    run = subprocess.run(
        [sys.executable, "-c", f"import {name}"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, f"import {name} failed:\n{run.stderr}"
