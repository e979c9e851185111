"""Build and cache the compiled variants of a kernel: primal, tangent and adjoint launchers.

A variant is specific to the kernel's argument kinds (arrays' dtypes and ranks, scalar types) and, for
derivatives, to which arguments are active. Its source is written to a cache directory and imported, so
numba's on-disk cache (``cache=True``) makes the next process start fast.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pad.kernel import runtime
from pad.kernel.analysis import Activity, activity, infer_types, overwritten_arrays, owned, reduced_arrays
from pad.kernel.emit import MODULE_HEADER, Launcher, launcher_source
from pad.kernel.frontend import ArrayKind, Kind, Lowered, lower_kernel
from pad.kernel.ir import (
    Assign,
    Elem,
    LocalArray,
    Pop,
    Stmt,
    Store,
    assigned,
    exprs_of,
    loaded_arrays,
    map_blocks,
    names_in,
    stored_arrays,
    walk,
)
from pad.kernel.reverse import Reverse, adj, private
from pad.kernel.tangent import Tangent, tan

MODES = ("primal", "tangent", "adjoint")


@dataclass
class Variant:
    """One compiled launcher and what its caller must pass and keep."""

    mode: str
    source: str
    launcher: Callable[..., Any]
    active_arrays: list[int]  # argument positions of arrays with shadows (passed in this order)
    active_scalars: list[int]  # argument positions of active scalars
    loaded: set[int]  # arrays whose values the kernel reads (the adjoint needs them)
    stored: set[int]  # arrays the kernel writes
    privates: list[tuple[str, int]] = field(default_factory=list)  # ("primal"|"shadow", position) per buffer
    overwrites: dict[int, int] = field(default_factory=dict)  # 1-D arrays never read, a[i + offset] stored


def cache_dir() -> Path:
    path = Path(os.environ.get("PAD_CACHE_DIR", Path.home() / ".cache" / "pad"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def build(
    fn: Callable[..., Any], kinds: list[Kind], active: tuple[bool, ...], mode: str, fastmath: bool
) -> Variant:
    """Lower, transform, print, compile (lazily, on first call) one variant of kernel ``fn``."""
    low = lower_kernel(fn, kinds)
    launch_index, params = low.params[0], low.params[1:]
    types = infer_types(low.body, low.kinds)
    active_inputs = {p for p, a in zip(params, active, strict=True) if a}
    act = activity(low.body, types, active_inputs, low.kinds)
    reduced = reduced_arrays(low.body, launch_index, low.kinds, low.filename)
    arrays = [k for k, p in enumerate(params) if isinstance(low.kinds[p], ArrayKind)]
    loaded_names, stored_names = loaded_arrays(low.body), stored_arrays(low.body)
    active_arrays = [k for k in arrays if active[k]]
    active_scalars = [k for k, p in enumerate(params) if active[k] and k not in arrays]
    name = f"{fn.__name__}_{mode}"
    launcher = Launcher(name, list(params))
    primal_privates = [("primal", params.index(a)) for a in sorted(reduced)]
    locals_ = [s for s in walk(low.body) if isinstance(s, LocalArray)]
    init: list[str] = []
    if mode == "primal":
        body = _privatize(low.body, reduced, launch_index)
        privates = primal_privates
    elif mode == "tangent":
        body = _privatize(Tangent(act, launch_index, reduced).block(low.body), reduced, launch_index)
        launcher.extras += [tan(params[k]) for k in active_arrays + active_scalars]
        privates = primal_privates + [("shadow", params.index(a)) for a in sorted(reduced) if a in act.arrays]
        locals_ += [LocalArray(tan(s.target), s.shape, s.dtype) for s in locals_ if s.target in act.arrays]
    else:
        shared = _shared_reads(low.body, act, launch_index) - stored_names
        rev = Reverse(low.body, low.kinds, types, act, launch_index, low.namer, shared)
        live_out = {adj(params[k]) for k in active_scalars}
        body = rev.sweep(live_out, droppable=set(params) - loaded_names)
        launcher.extras += [adj(params[k]) for k in active_arrays]
        privates = [("shadow", params.index(a)) for a in sorted(shared)]
        launcher.accumulators = [adj(params[k]) for k in active_scalars]
        locals_ += [LocalArray(adj(s.target), s.shape, s.dtype) for s in locals_ if s.target in act.arrays]
        init = sorted((_scalars_in(body) | set(launcher.accumulators)) - set(low.params))
    buffers = [_buffer(kind, params[pos], mode) for kind, pos in privates]
    launcher.extras += buffers
    launcher.privates = buffers
    if launcher.accumulators:
        launcher.extras.append("_act")
    launcher.locals = locals_
    source = MODULE_HEADER.format(origin=f"{low.filename}:{fn.__name__} ({mode})") + launcher_source(
        launcher, launch_index, body, types, low.kinds, init, fastmath
    )
    index = {p: k for k, p in enumerate(params)}
    return Variant(
        mode,
        source,
        _load(name, source),
        active_arrays,
        active_scalars,
        {index[a] for a in loaded_names if a in index},
        {index[a] for a in stored_names if a in index},
        privates,
        {index[a]: c for a, c in overwritten_arrays(low.body, launch_index, low.kinds).items() if a in index},
    )


def _buffer(kind: str, param: str, mode: str) -> str:
    if kind == "primal":
        return f"_priv{param}"
    return f"_priv{tan(param) if mode == 'tangent' else adj(param)}"


def _privatize(body: list[Stmt], reduced: set[str], launch_index: str) -> list[Stmt]:
    """Send ``a[j] += v`` at shared indices of reduced arrays to the thread's private buffer."""
    out: list[Stmt] = []
    for s in body:
        if isinstance(s, Store) and s.accumulate and s.array in reduced and not owned(s.index, launch_index):
            s = Store(private(s.array), s.index, s.value, True, line=s.line)
        else:
            s = map_blocks(s, lambda b: _privatize(b, reduced, launch_index))
        out.append(s)
    return out


def _shared_reads(body: list[Stmt], act: Activity, launch_index: str) -> set[str]:
    """Active global arrays read at indices other iterations may share: their adjoints accumulate there."""
    return {
        s.value.array
        for s in walk(body)
        if isinstance(s, Assign)
        and isinstance(s.value, Elem)
        and s.value.array in act.arrays
        and not owned(s.value.index, launch_index)
    }


def _scalars_in(body: list[Stmt]) -> set[str]:
    """Scalars the adjoint sweep assigns or whose adjoint it reads (each starts an iteration at zero)."""
    used = {n for s in walk(body) for e in exprs_of(s) for n in names_in(e) if n.startswith("_b_")}
    return assigned(body) | {s.target for s in walk(body) if isinstance(s, Pop)} | used


_RUNTIME_DIGEST = hashlib.sha256(Path(runtime.__file__).read_bytes()).hexdigest()


def _load(name: str, source: str) -> Callable[..., Any]:
    """Write ``source`` to the cache directory (once per distinct source) and import the launcher.

    The file name hashes the source and the runtime helpers it calls: numba's on-disk cache does not track
    callees, so a changed runtime must mean a new file.
    """
    digest = hashlib.sha256((source + _RUNTIME_DIGEST).encode()).hexdigest()[:16]
    module_name = f"pad_generated_{name}_{digest}"
    if module_name in sys.modules:
        return getattr(sys.modules[module_name], name)
    path = cache_dir() / f"{module_name}.py"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        tmp.replace(path)
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return getattr(module, name)


__all__ = ["MODES", "Lowered", "Variant", "build", "cache_dir"]
