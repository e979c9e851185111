"""Which schedule reverses a loop best in a given memory, and where an online loop keeps its snapshots.

Costs are counted in step calls, the first sweep included (``optimal_steps_binomial``'s measure): ``n`` for
a loop whose every step is recorded as it runs, about ``2n`` when each step is run once more to record it.
Memory is counted in bytes measured on the loop itself (``Sizes``): a snapshot, the records of one step (the
copies its adjoint keeps), and the copy of the final state a restoring schedule puts back at the end.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numba
from checkpoint_schedules import (
    CheckpointSchedule,
    MixedCheckpointSchedule,
    MultistageCheckpointSchedule,
    StorageType,
    mixed,
    multistage,
)

# The schedule library jit-compiles its step-count helpers with numba when numba is installed: uncached, that
# costs seconds in every process. n_advance is cheap in plain Python; the Mixed schedule's table (O(n^2 s))
# is compiled once into numba's cache, and the last few tables are kept.
multistage.n_advance = getattr(multistage.n_advance, "py_func", multistage.n_advance)
_mixed_table = numba.njit(cache=True)(
    getattr(mixed.mixed_steps_tabulation, "py_func", mixed.mixed_steps_tabulation)
)
mixed.mixed_steps_tabulation = functools.lru_cache(maxsize=4)(_mixed_table)

MIXED_WORK = 4e8
"""The Mixed schedule's table costs about ``n * n * s`` operations: past this, it is not considered."""

__all__ = ["Choice", "Dynamic", "Sizes", "choose", "revolve_steps"]


@dataclass
class Sizes:
    """Bytes measured on a loop: the largest snapshot, the largest records of one step, the whole state."""

    snapshot: int = 0
    record: int = 0
    final: int = 0

    @property
    def minimum(self) -> int:
        """The least memory any restoring schedule needs: one snapshot, one step's records, the final copy."""
        return self.snapshot + self.record + self.final


@dataclass(frozen=True)
class Choice:
    """A schedule for ``n`` steps: its name, step calls, and the snapshots (or Mixed's units) it uses."""

    name: str  # "keep-all", "revolve", "mixed" or "two-level"
    n: int
    steps: int
    ram: int
    disk: int = 0
    room: int = 0  # the bytes it was chosen to fit in (``choose``'s ``free``)
    held: bool = False  # the start's snapshot is held through the schedule, counted in ``room`` (``choose``)

    def schedule(self) -> CheckpointSchedule:
        """A fresh ``checkpoint_schedules`` schedule of this choice (not for keep-all)."""
        if self.name == "mixed":
            return MixedCheckpointSchedule(self.n, self.ram, storage=StorageType.RAM)
        return MultistageCheckpointSchedule(self.n, self.ram, self.disk)

    @property
    def recomputed(self) -> int:
        return self.steps - self.n

    def need(self, sizes: Sizes) -> int:
        """The most bytes its snapshots and records in memory hold at once for ``sizes`` (``choose`` picks a
        schedule whose need fits its ``room``)."""
        a, b = max(sizes.snapshot, 1), max(sizes.record, 1)
        if self.name == "keep-all":
            return self.n * b + a
        if self.name == "mixed":
            return self.ram * max(a, b) + b + (a if self.held and self.ram >= self.n - 1 else 0)
        return self.ram * a + b


def revolve_steps(n: int, snapshots: int) -> int:
    """Step calls of the binomial (Revolve) schedule of ``n`` steps with ``snapshots`` snapshots: Griewank's
    closed form, ``n`` plus ``t n - C(s + t, t - 1)`` for the repetition number ``t`` (the least with
    ``C(s + t, t) >= n``), which ``optimal_steps_binomial`` computes by a recursion too deep for many
    snapshots."""
    if n <= 1:
        return n
    s, t = min(snapshots, n - 1), 0
    while math.comb(s + t, t) < n:
        t += 1
    return n + t * n - math.comb(s + t, t - 1)


def mixed_steps(n: int, units: int) -> int | None:
    """Step calls of the Mixed schedule of ``n`` steps with ``units`` units (None: its table is too big)."""
    if n <= 1 or units >= n - 1:
        return n
    if float(n) * n * units > MIXED_WORK:
        return None
    return int(mixed.mixed_steps_tabulation(n, units)[n, units, 2])


def choose(
    n: int, free: int, sizes: Sizes, disk_slots: int = 0, records: bool = True, held: bool = False
) -> Choice | None:
    """The schedule with the fewest step calls for ``n`` steps in ``free`` bytes, or None if none fits.
    ``records=False``: only schedules that keep no step's records beyond the one reversed at once
    (Revolve, two-level), for steps recomputed faster than recorded ones are reversed (replays).
    ``held``: ``free`` counts the snapshot of the start, which the loop holds until the schedule is done
    with it: Mixed with a unit for every step but the last keeps the records of every step and no snapshot
    of the start (its first unit holds the records of the first step), so the snapshot needs its own room.

    ``free`` holds the snapshots and records of these steps, the snapshot of their start included; the
    final state's copy is not in it. Candidates: keep every step's records (they fit); Revolve, whose
    snapshots take ``free`` less the records of the step it reverses; Mixed, whose units each hold a
    snapshot or one step's records, so each is as big as the larger of the two; with ``disk_slots``, the
    two-level Multistage schedule with those snapshots on disk beside Revolve's in memory.
    """
    a, b = max(sizes.snapshot, 1), max(sizes.record, 1)
    if records and n * b + a <= free:
        return Choice("keep-all", n, n, 0, room=free)
    options = []
    slots = (free - b) // a
    if slots >= 1:
        options.append(Choice("revolve", n, revolve_steps(n, slots), int(slots), room=free))
        if disk_slots > 0:
            total = revolve_steps(n, slots + disk_slots)
            options.append(Choice("two-level", n, total, int(slots), int(min(disk_slots, n)), room=free))
    units = (free - b) // max(a, b)
    if held and units >= n - 1 and (n - 1) * max(a, b) + b + a > free:
        units = n - 2  # then its first unit holds the snapshot of the start
    steps = mixed_steps(n, int(min(units, n - 1))) if units >= 1 and records else None
    if steps is not None:
        options.append(Choice("mixed", n, steps, int(min(units, n - 1)), room=free, held=held))
    return min(options, key=lambda c: (c.steps, c.disk > 0, c.name != "revolve"), default=None)


INFINITE = 1 << 62


class Dynamic:
    """Online placement of at most ``slots`` snapshots over a loop of unknown length (Wang, Moin and
    Iaccarino's dynamic checkpointing, SIAM J. Sci. Comput. 31, 2009).

    Every step gets a snapshot; when the slots are full one goes: the latest "dispensable" one (one whose
    level is below that of a later snapshot), or else the newest, whose successor then gets its level plus
    one. The snapshots so spread are, for any step count, those of a binomial schedule of the same
    repetition number, so reversing the gaps between them with Revolve costs close to the offline optimum.
    """

    def __init__(self, slots: int, levels: dict[int, int] | None = None) -> None:
        self.slots = slots
        self.levels: dict[int, int] = dict(levels or {})

    def start(self, t: int) -> None:
        """A snapshot at ``t`` that stays (the loop's start, or where a resumed run continues)."""
        self.levels[t] = INFINITE

    def _dispensable(self) -> int | None:
        """The latest snapshot whose level is below that of a later one."""
        later = -1
        for k in sorted(self.levels, reverse=True):
            if self.levels[k] < later:
                return k
            later = max(later, self.levels[k])
        return None

    def place(self, t: int, slots: int | None = None) -> tuple[list[int], bool]:
        """Before step ``t``: the snapshots to drop, and whether to take one at ``t``. ``slots``: a new
        number of slots (a memory budget's, as the snapshots' sizes become known)."""
        drops: list[int] = []
        if slots is not None:
            self.slots = max(1, slots)
            while len(self.levels) > self.slots:
                victim = self._dispensable()
                if victim is None:
                    victim = max((k for k, v in self.levels.items() if v < INFINITE), default=None)
                if victim is None:
                    break
                del self.levels[victim]
                drops.append(victim)
        if t in self.levels:
            return drops, False
        if len(self.levels) < self.slots:
            self.levels[t] = 0
            return drops, True
        dispensable = self._dispensable()
        if dispensable is not None:
            del self.levels[dispensable]
            self.levels[t] = 0
            return [*drops, dispensable], True
        newest = max(self.levels)
        if self.levels[newest] >= INFINITE:
            return drops, False  # a single slot: only the start is kept
        level = self.levels.pop(newest)
        self.levels[t] = level + 1
        return [*drops, newest], True
