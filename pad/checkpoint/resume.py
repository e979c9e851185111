"""Resumable loops: a run that reaches its time limit or gets SIGTERM saves itself and stops; a later run
with the same program resumes it and computes the same gradient, bit for bit.

What is saved, at a step boundary, in ``directory``:
- in the forward sweep before step ``t``: the state arrays' values, the snapshots held (positions, values,
  what they leave out) and the online placement's levels; records of steps cannot be saved, so a resumed
  run recomputes the steps they covered from the snapshots;
- in the reverse pass once steps ``done`` and later are reversed: the final state (to put back at the end),
  the snapshots below ``done``, every shadow the loop's adjoint may have changed, and the adjoints of
  ``Active`` scalars.
Arrays are named by their paths from the loop's arguments and step (``args[0].xv``,
``step.self.force``); shadows of arrays registered before the loop, by their order of registration, which
is the same in every run of the same program. A resumed run runs the program again up to the loop, which
then starts from the save: a forward save continues the sweep at ``t``; a reverse save puts the final state
back and returns, and when the reverse pass reaches the loop it puts the saved shadows in place and goes on.

Layout: ``pad-run.json`` (the format, pad's version, the problem's identity, the rank count and which save
is current) and ``rank-R/save-K/`` (``manifest.json`` and one ``.npy`` file per array, with checksums).
A save is written beside the current one and made current by replacing ``pad-run.json`` (atomic), so a
disk that fills, or a kill, leaves the directory holding the previous save.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.metadata
import json
import os
import shutil
import signal
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from pad import arrays
from pad.checkpoint.layout import arrays_in, reachable
from pad.checkpoint.plan import INFINITE
from pad.checkpoint.store import SaveError, _root

FORMAT = 1
RUN = "pad-run.json"
EXIT_STOPPED = 75  # EX_TEMPFAIL: stopped, try again (a Slurm script requeues on it)


def _pad_version() -> str:
    try:
        return importlib.metadata.version("pad")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class Stopped(Exception):
    """A resumable loop saved itself and stopped; resume with ``Resumable(directory, resume=True)``."""

    exit_status = EXIT_STOPPED

    def __init__(self, directory: str, reason: str, where: str) -> None:
        self.directory, self.reason, self.where = directory, reason, where
        super().__init__(f"stopped by {reason} {where}; saved to {directory}")


class ResumeError(ValueError):
    """A saved run that cannot be resumed here (another problem, version or rank count, or damaged)."""


def _crc(a: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(a).view(np.uint8).reshape(-1).data)


class Resumable:
    """Where and when a checkpointed loop saves itself: pass ``resumable=`` to ``loop``/``while_loop``.

    ``directory``: where saves (and two-level snapshots) go. ``time_limit``: seconds from now after which the
    loop saves and raises ``Stopped`` at its next step boundary (after one step at least, so a resumed run
    always gets on). ``signals``: signals that do the same (SIGTERM, which Slurm sends before its time
    limit; handlers are installed from the main thread, and put back by ``close``). ``identity``: a JSON-able
    description of the problem that a resumed run must match. ``comm``: an mpi4py (or ``pad.mpi``)
    communicator whose ranks stop together; each saves its part (every rank makes its ``Resumable``, and
    a refusal or a failed save on one rank is an error on all). ``resume``: continue the run saved in
    ``directory`` (``ResumeError`` if there is none, or it differs, or it is damaged; nothing is changed
    then); without it, a directory holding a saved run is refused too, so no save is overwritten.
    """

    clock: Callable[[], float] = time.monotonic

    def __init__(
        self,
        directory: str,
        *,
        time_limit: float | None = None,
        signals: tuple[int, ...] = (signal.SIGTERM,),
        identity: dict[str, Any] | None = None,
        comm: Any = None,
        resume: bool = False,
    ) -> None:
        self.directory = os.path.abspath(directory)
        self.identity = json.loads(json.dumps(identity or {}))
        self.comm = getattr(comm, "mpi", comm)
        self.rank = self.comm.Get_rank() if self.comm is not None else 0
        self.size = self.comm.Get_size() if self.comm is not None else 1
        self.deadline = None if time_limit is None else type(self).clock() + float(time_limit)
        self.requested: str | None = None
        self.saved: dict[str, Any] | None = None
        self.count = 0
        self.done = False
        refused = None
        try:
            if resume:
                self.saved = self._load()
                self.count = int(self.saved["save"])
            elif os.path.exists(os.path.join(self.directory, RUN)):
                raise ResumeError(
                    f"{self.directory} holds a saved run ({self._describe_saved()}); resume it, or use "
                    "another directory"
                )
        except ResumeError as exc:
            refused = str(exc)
        refusals = self._gather(refused)
        if refusals:  # every rank refuses alike: one going on alone would wait for the others
            raise ResumeError(refused or refusals[0])
        self._previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in signals:
                self._previous[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.requested = signal.Signals(signum).name

    def close(self) -> None:
        """Put back the signal handlers this replaced."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def __enter__(self) -> Resumable:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def rank_directory(self) -> str:
        return os.path.join(self.directory, f"rank-{self.rank}")

    # -- when --------------------------------------------------------------------------------------------
    def should_stop(self, progress: int) -> bool:
        """Whether to stop now, agreed by every rank. The time limit counts once this session has run or
        reversed a step (``progress``); a signal at once."""
        local = 0
        if self.requested is not None:
            local = 2
        elif self.deadline is not None and progress > 0 and self.clock() >= self.deadline:
            local = 1
        if self.comm is not None and self.size > 1:
            from mpi4py import MPI

            local = self.comm.allreduce(local, op=MPI.MAX)
        if local:
            self._reason = self.requested or ("a signal" if local == 2 else "the time limit")
        return bool(local)

    # -- saving ------------------------------------------------------------------------------------------
    def save_forward(self, lp: Any, t: int) -> None:
        """Save the loop's forward sweep before step ``t`` and raise ``Stopped``."""

        def gather() -> tuple[dict[str, Any], dict[str, np.ndarray]]:
            names = _Names(lp)
            files: dict[str, np.ndarray] = {}
            state = {names.of(r, "the loop state"): names.file(files, r) for r in lp.store.roots()}
            dynamic = None
            if lp.dynamic is not None:
                levels = {str(k): v for k, v in lp.dynamic.levels.items()}
                dynamic = {"slots": lp.dynamic.slots, "levels": levels}
            manifest = {
                "kind": "forward",
                "step": t,
                "state": state,
                "snapshots": _snapshots(lp, names, files, below=None),
                "recording": lp.recording,
                "dynamic": dynamic,
            }
            return manifest, files

        self._commit(lp, gather, f"in the forward sweep, before step {t}")

    def save_reverse(self, lp: Any, done: int) -> None:
        """Save the loop's reverse pass with steps ``done`` and later reversed, and raise ``Stopped``."""

        def gather() -> tuple[dict[str, Any], dict[str, np.ndarray]]:
            names = _Names(lp)
            files: dict[str, np.ndarray] = {}
            final = lp.store.held.get(-1)
            state = {}
            for r in lp.store.roots():
                saved = final.get(id(r)) if final is not None else None
                value = arrays.to_host(saved.data()) if saved is not None else r
                state[names.of(r, "the loop state")] = names.file(files, value, key=id(saved or r))
            shadows = []
            for serial, a, shadow in lp.ctx.registered():
                path = names.any_path.get(id(a))
                if path is not None:
                    shadows.append({"path": path, "file": names.file(files, shadow)})
                elif serial < lp.serial:
                    shadows.append({"serial": serial, "file": names.file(files, shadow)})
                elif np.any(arrays.to_host(shadow)):
                    raise ValueError(
                        f"pad.checkpoint: cannot save the run: an array of shape {a.shape} that the loop's "
                        "arguments and step do not reach has a non-zero adjoint; pass it to the loop"
                    )
            manifest = {
                "kind": "reverse",
                "step": done,
                "nsteps": lp.stats.nsteps,
                "state": state,
                "snapshots": _snapshots(lp, names, files, below=done),
                "shadows": shadows,
                "active": list(lp.ctx.active_adjoints),
            }
            return manifest, files

        self._commit(lp, gather, f"in the reverse pass, with steps {done} and later reversed")

    def _commit(
        self,
        lp: Any,
        gather: Callable[[], tuple[dict[str, Any], dict[str, np.ndarray]]],
        where: str,
    ) -> None:
        """Write this rank's part of save ``count + 1`` (``gather`` names it), make it current once every
        rank has, and stop. A rank that cannot name its part, or write it, fails every rank alike: the
        others would wait for it."""
        k = self.count + 1
        folder = os.path.join(self.rank_directory(), f"save-{k}")
        unnamed = written = None
        try:
            manifest, files = gather()
        except ValueError as exc:
            unnamed = str(exc)
        else:
            manifest |= {
                "format": FORMAT,
                "rank": self.rank,
                "serial": lp.serial,
                "layout": _Names(lp).layout(),
                "stats": dict(vars(lp.stats)),
                "sizes": dict(vars(lp.sizes)),
                "protected": sorted(lp.protected),
                "checksums": {name: _crc(a) for name, a in files.items()},
            }
            written = self._write(folder, manifest, files)
        why = unnamed or written
        failures = self._gather(
            None if why is None else (self.rank, "unnamed" if unnamed else "written", why)
        )
        if failures:
            shutil.rmtree(folder, ignore_errors=True)
            rank, kind, why = failures[0]
            at = f"rank {rank}: " if self.size > 1 else ""
            if kind == "unnamed":
                raise ValueError(why if rank == self.rank else f"{at}{why}")
            held = self._describe_saved() if os.path.exists(os.path.join(self.directory, RUN)) else "nothing"
            raise SaveError(
                errno.ENOSPC if "space" in why.lower() else errno.EIO,
                f"pad.checkpoint: saving the run to {self.directory} failed ({at}{why}); it still holds {held}",
                agreed=True,
            )
        if self.rank == 0:
            run = {
                "format": FORMAT,
                "pad": _pad_version(),
                "identity": self.identity,
                "ranks": self.size,
                "save": k,
                "where": where,
            }
            tmp = os.path.join(self.directory, RUN + ".tmp")
            with open(tmp, "w") as fh:
                json.dump(run, fh, indent=1)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, os.path.join(self.directory, RUN))
        self._barrier()
        shutil.rmtree(os.path.join(self.rank_directory(), f"save-{self.count}"), ignore_errors=True)
        self.count = k
        lp.close()
        raise Stopped(self.directory, self._reason, where)

    def _gather(self, problem: Any) -> list[Any]:
        """Every rank's ``problem`` that is not None, in rank order: the same list on every rank."""
        if self.comm is None or self.size == 1:
            return [] if problem is None else [problem]
        return [p for p in self.comm.allgather(problem) if p is not None]

    def _write(self, folder: str, manifest: dict[str, Any], files: dict[str, np.ndarray]) -> str | None:
        """Write the files and the manifest into ``folder`` (via a temporary name); the error, if any."""
        tmp = folder + ".tmp"
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp)
            for name, a in files.items():
                np.save(os.path.join(tmp, name), a)
            with open(os.path.join(tmp, "manifest.json"), "w") as fh:
                json.dump(manifest, fh)
            os.replace(tmp, folder)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            return exc.strerror or str(exc)
        return None

    def _barrier(self) -> None:
        if self.comm is not None and self.size > 1:
            self.comm.Barrier()

    def finish(self) -> None:
        """The run is complete: remove its save."""
        self.done = True
        self._barrier()
        if self.rank == 0:
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(self.directory, RUN))
        self._barrier()
        shutil.rmtree(self.rank_directory(), ignore_errors=True)

    # -- loading -----------------------------------------------------------------------------------------
    def _describe_saved(self) -> str:
        with contextlib.suppress(OSError, ValueError, KeyError):
            with open(os.path.join(self.directory, RUN)) as fh:
                run = json.load(fh)
            return f"save {run['save']}, stopped {run['where']}"
        return "a save"

    def _load(self) -> dict[str, Any]:
        """This rank's saved part, checked against this run; ``ResumeError`` saying what differs."""
        path = os.path.join(self.directory, RUN)
        if not os.path.isdir(self.directory):
            raise ResumeError(f"{self.directory}: no such directory")
        try:
            with open(path) as fh:
                run = json.load(fh)
            save = int(run["save"])
        except FileNotFoundError:
            raise ResumeError(f"{self.directory} holds no saved run ({RUN} is missing)") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ResumeError(f"{self.directory} is damaged: {RUN} cannot be read ({exc})") from None
        differences = []
        if run.get("format") != FORMAT:
            differences.append(f"save format {run.get('format')} (this pad writes {FORMAT})")
        if run.get("pad") != _pad_version():
            differences.append(f"pad version {run.get('pad')} (this is {_pad_version()})")
        if run.get("ranks") != self.size:
            differences.append(f"{run.get('ranks')} ranks (this run has {self.size})")
        saved = run.get("identity", {})
        for key in sorted(set(saved) | set(self.identity)):
            if saved.get(key) != self.identity.get(key):
                differences.append(f"{key} {saved.get(key)!r} (this run: {self.identity.get(key)!r})")
        if differences:
            raise ResumeError(f"{self.directory} holds another run: " + "; ".join(differences))
        folder = os.path.join(self.rank_directory(), f"save-{save}")
        try:
            with open(os.path.join(folder, "manifest.json")) as fh:
                manifest = json.load(fh)
            for name, crc in manifest["checksums"].items():
                try:
                    a = np.load(os.path.join(folder, name), allow_pickle=False)
                except (OSError, ValueError, EOFError) as exc:
                    raise ValueError(f"{name}: {exc}") from None
                if _crc(a) != crc:
                    raise ValueError(f"{name} does not match its checksum")
        except (OSError, ValueError, KeyError, TypeError, EOFError) as exc:
            raise ResumeError(f"{self.directory} is damaged: rank {self.rank}'s save {save}: {exc}") from None
        manifest["folder"], manifest["save"], manifest["where"] = folder, save, run.get("where", "")
        return manifest

    def array(self, name: str) -> np.ndarray:
        assert self.saved is not None
        return np.load(os.path.join(self.saved["folder"], name), allow_pickle=False)


class _Names:
    """Paths of the arrays a loop reaches (its arguments', its step's), and the files of a save.

    A state array is a root (the owner of its memory); it is named by the path of an array reached that
    covers all of it (itself, or a view of the whole, as ``np.linspace`` returns), and written through it.
    """

    def __init__(self, lp: Any) -> None:
        found = [*arrays_in(lp.args, "args"), *reachable(lp.step, "step")]
        self.by_path: dict[str, Any] = {}
        self.paths: dict[int, str] = {}  # id(root) -> path of an array covering it
        self.any_path: dict[int, str] = {}  # id(array) -> its path
        self.arrays: dict[str, Any] = {}  # path -> array
        for p, a in found:
            self.any_path.setdefault(id(a), p)
            self.arrays.setdefault(p, a)
            r = _root(a)
            if r is a or (a.nbytes == r.nbytes and arrays.c_contiguous(a)):
                self.by_path.setdefault(p, a)
                self.paths.setdefault(id(r), p)
        self._files: dict[int, str] = {}

    def layout(self) -> list[list[Any]]:
        return [[p, list(a.shape), str(a.dtype)] for p, a in self.by_path.items()]

    def of(self, r: Any, what: str) -> str:
        path = self.paths.get(id(r))
        if path is None:
            raise ValueError(
                f"pad.checkpoint: cannot save the run: an array of {what} (shape {tuple(r.shape)}) is not "
                "reachable from the loop's arguments or its step (its object, closure or globals)"
            )
        return path

    def file(self, files: dict[str, np.ndarray], a: Any, key: int | None = None) -> str:
        key = id(a) if key is None else key
        if key not in self._files:
            name = f"{len(files)}.npy"
            files[name] = np.array(arrays.to_host(a), copy=True)
            self._files[key] = name
        return self._files[key]


def _snapshots(lp: Any, names: _Names, files: dict[str, np.ndarray], below: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in lp.store.positions():
        if below is not None and n >= below:
            continue
        entries = {}
        for r in lp.store.roots():
            saved = lp.store.held[n].get(id(r))
            if saved is None:
                continue
            entries[names.of(r, "the loop state")] = {
                "file": names.file(files, np.asarray(arrays.to_host(saved.data())), key=id(saved)),
                "hole": None if saved.hole is None else list(saved.hole),
            }
        out[str(n)] = {"arrays": entries, "disk": n in lp.store.on_disk}
    return out


def restore(lp: Any, r: Resumable) -> dict[str, Any]:
    """Put a loop back as saved (state arrays, snapshots, counters): the saved manifest."""
    m = r.saved
    assert m is not None
    names = _Names(lp)
    differences = []
    if m["serial"] != lp.serial:
        differences.append(
            f"the program registered {lp.serial} arrays before the loop (the saved run: {m['serial']})"
        )
    if m["layout"] != names.layout():
        saved = {p: (s, d) for p, s, d in m["layout"]}
        now = {p: (s, d) for p, s, d in names.layout()}
        for p in sorted(set(saved) | set(now)):
            if saved.get(p) != now.get(p):
                differences.append(f"{p}: {saved.get(p)} saved, {now.get(p)} now")
    if differences:
        raise ResumeError(f"{r.directory} holds a run of another loop: " + "; ".join(differences[:8]))
    by_path = names.by_path
    lp.ctx.will_write([by_path[path] for path in m["state"]])  # values kept before the loop are copied
    for path, name in m["state"].items():
        a = lp.ctx.writable(by_path[path])
        arrays.assign(a, r.array(name).reshape(a.shape))
    store = lp.store
    for path in m["state"]:
        store.adopt(_root(by_path[path]))
    for n, snap in m["snapshots"].items():
        for path, entry in snap["arrays"].items():
            hole = None if entry["hole"] is None else tuple(entry["hole"])
            store.put(int(n), _root(by_path[path]), r.array(entry["file"]), hole)
    for key, value in m["stats"].items():
        if key not in ("memory", "schedule"):
            setattr(lp.stats, key, value)
    lp.stats.sessions += 1
    for key, value in m["sizes"].items():
        setattr(lp.sizes, key, value)
    lp.protected = set(m["protected"])
    lp.track()
    return m


def restore_shadows(lp: Any, r: Resumable) -> None:
    """Put the saved shadows and the adjoints of active scalars in place (a reverse save's)."""
    m = r.saved
    assert m is not None
    ctx = lp.ctx
    names = _Names(lp)
    by_path = names.arrays
    by_serial = {serial: a for serial, a, _ in ctx.registered()}
    for entry in m["shadows"]:
        a = by_path.get(entry["path"]) if "path" in entry else by_serial.get(entry["serial"])
        value = r.array(entry["file"])
        if a is None or tuple(a.shape) != value.shape:
            raise ResumeError(
                f"{r.directory}: a saved adjoint has no array of its shape in this run ({entry})"
            )
        shadow = ctx.shadow(a)
        if shadow is not None:
            arrays.assign(shadow, value)
    for slot, value in enumerate(m["active"][: len(ctx.active_adjoints)]):
        ctx.active_adjoints[slot] = value


def dynamic_levels(m: dict[str, Any]) -> dict[int, int] | None:
    d = m.get("dynamic")
    return None if d is None else {int(k): min(int(v), INFINITE) for k, v in d["levels"].items()}
