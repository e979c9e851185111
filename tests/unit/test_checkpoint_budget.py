"""pad.checkpoint in a memory budget: the schedules' step counts are checkpoint_schedules' own, a budget that
holds every step recomputes nothing, smaller ones are honoured (pad's measure and tracemalloc's), and the
gradients are those of keeping every step, bit for bit."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from checkpoint_schedules import Forward, MixedCheckpointSchedule, optimal_steps_binomial

import pad
from pad import checkpoint
from pad.checkpoint import plan
from tests.unit import kops
from tests.unit.kops import three_field_step as step

N = 16


def grads(nsteps, n=N, while_=False, step=step, **opts):
    u, v, w = np.linspace(0.1, 1.0, n), np.linspace(-0.5, 0.5, n), np.zeros(n)
    du, dv, dw = np.zeros(n), np.linspace(1.0, 2.0, n), np.linspace(-1.0, 1.0, n)
    stats = checkpoint.Stats()

    def f(u, v, w):
        if while_:
            count = [0]

            def counted(t, u, v, w):
                count[0] = t + 1
                step(t, u, v, w)

            checkpoint.while_loop(lambda *_: count[0] < nsteps, counted, u, v, w, stats=stats, **opts)
        else:
            checkpoint.loop(step, nsteps, u, v, w, stats=stats, **opts)

    pad.autodiff(f, pad.Dup(u, du), pad.Dup(v, dv), pad.Dup(w, dw))
    return (u, v, w, du, dv, dw), stats


_kept: dict[int, tuple] = {}


def kept(nsteps):
    if nsteps not in _kept:
        _kept[nsteps] = grads(nsteps)[0]
    return _kept[nsteps]


def _calls(schedule) -> int:
    """Step calls of a ``checkpoint_schedules`` schedule, counted from its actions."""
    return sum(len(a) for a in schedule if isinstance(a, Forward))


@pytest.mark.parametrize("n", [2, 9, 40, 150])
@pytest.mark.parametrize("free_units", [1.5, 3.2, 7.9, 30])
@pytest.mark.parametrize("ratio", [0.5, 1.0, 2.0])  # a step's records against a snapshot
def test_the_costs_the_choice_is_made_on_are_the_schedules_own(n, free_units, ratio):
    sizes = plan.Sizes(snapshot=1000, record=int(1000 * ratio), final=1000)
    choice = plan.choose(n, int(free_units * 1000 + sizes.record), sizes)
    if choice is None:
        return
    if choice.name == "keep-all":
        assert n * sizes.record + sizes.snapshot <= free_units * 1000 + sizes.record
        return
    assert choice.steps == _calls(choice.schedule())
    if choice.name == "revolve":
        assert choice.steps == optimal_steps_binomial(n, min(choice.ram, n - 1))
    others = [plan.revolve_steps(n, choice.ram if choice.name == "revolve" else 1)]
    units = int((free_units * 1000) // max(sizes.snapshot, sizes.record))
    if units >= 1:
        others.append(_calls(MixedCheckpointSchedule(n, min(units, n - 1))))
    assert choice.steps <= min(others)  # the better of the library's schedules in that memory


def test_a_mixed_gap_keeping_every_step_leaves_room_for_the_start_it_holds():
    """Mixed with a unit for every step but the last keeps every step's records and no snapshot of the
    start, which a gap of the reverse pass holds till its end: the choice leaves room for it too (a gap of
    3 steps in 848 bytes chose 2 units of 256 and overran its room by the start's 256)."""
    sizes = plan.Sizes(snapshot=256, record=256, final=384)
    for n in range(2, 12):
        for free in range(256, 4000, 16):
            choice = plan.choose(n, free, sizes, held=True)
            if choice is None:
                continue
            assert choice.need(sizes) <= free
            if choice.name == "mixed" and choice.ram >= n - 1:
                assert n * 256 + 256 <= free  # every step's records and the start's snapshot
    assert plan.choose(3, 848, sizes).ram == 2  # not held: its units are all the memory it takes


def test_revolve_steps_is_the_binomial_optimum():
    for n in range(1, 80):
        for s in range(1, 30):
            assert plan.revolve_steps(n, s) == optimal_steps_binomial(n, min(s, n - 1))
    assert plan.revolve_steps(5000, 6000) == 2 * 5000 - 1  # where the library's recursion is too deep
    assert plan.revolve_steps(5000, 4000) == 5000 + 2 * 5000 - 4002  # repetition number 2: C(4002, 2) >= n


@pytest.mark.parametrize("while_", [False, True])
def test_a_budget_that_holds_every_step_recomputes_nothing(while_):
    got, stats = grads(40, while_=while_, memory="1MB")
    assert np.array_equal(np.concatenate(got), np.concatenate(kept(40)))
    assert (stats.schedule, stats.recomputed) == ("keep-all", 0)
    assert stats.snapshots_peak <= 1 and 40 * stats.record_bytes <= stats.peak_memory <= 10**6  # all records


@pytest.mark.parametrize("while_", [False, True])
@pytest.mark.parametrize("budget", [1_400, 2_000, 4_000, 9_000])
def test_a_small_budget_is_honoured_and_gives_the_same_bits(while_, budget):
    got, stats = grads(60, while_=while_, memory=budget)
    assert np.array_equal(np.concatenate(got), np.concatenate(kept(60)))
    assert stats.recomputed > 0 and stats.peak_memory <= budget
    _, best = checkpoint.best_offline(60, budget, stats)
    if not while_:
        # the offline schedule for the steps after the few that measured the sizes; it may do better than the
        # offline count, which takes every snapshot whole, where its first snapshot left out what the first
        # step overwrites unread
        assert stats.recomputed <= best + 3


def test_no_offline_schedule_in_a_budget_below_two_snapshots():
    _, stats = grads(60, while_=True, memory=1_400)
    assert checkpoint.best_offline(60, 2 * stats.snapshot_bytes - 1, stats) is None
    assert checkpoint.best_offline(60, 1_400, stats) is not None


@pytest.mark.parametrize("budget", [1_400, 2_000, 4_000, 9_000])
def test_an_expected_step_count_gives_while_loop_the_offline_schedule(budget):
    got, stats = grads(60, while_=True, memory=budget, expected_steps=60)
    assert np.array_equal(np.concatenate(got), np.concatenate(kept(60)))
    assert stats.peak_memory <= budget
    assert stats.recomputed <= checkpoint.best_offline(60, budget, stats)[1] + 3
    other, _ = grads(60, while_=True, memory=budget, expected_steps=45)  # a wrong guess: still right
    assert np.array_equal(np.concatenate(other), np.concatenate(kept(60)))


def _late_state(at):
    """A step writing u and v every step, and w, a state array too, from step ``at`` on."""

    def step(t, u, v, w):
        kops.sin_to(u, v)
        kops.axpy(0.3, v, u)
        if t >= at:
            kops.axpy(0.2, u, w)
            kops.axpy(0.1, w, v)

    return step


@pytest.mark.parametrize("budget", [1_000, 1_100])
def test_a_schedule_given_up_when_the_state_grows_goes_on_online(budget):
    """w appears after the offline schedule was chosen for u and v: the schedule is given up before the
    step it had just snapshotted, whose snapshot the online placement then drops (that step ran owing a
    dropped snapshot: KeyError). The gradient is keeping every step's, bit for bit, within the budget."""
    step = _late_state(3)
    got, stats = grads(30, step=step, memory=budget)
    assert np.array_equal(np.concatenate(got), np.concatenate(grads(30, step=step)[0]))
    assert stats.schedule.startswith("online") and stats.peak_memory <= budget


@pytest.mark.parametrize(
    "while_,budget", [(False, 1_200), (False, 2_400), (True, 2_400), (True, 3_600)], ids=str
)
@pytest.mark.parametrize("at", [3, 8, 15])
def test_a_state_array_first_written_mid_run_keeps_the_budget(while_, budget, at):
    """w (16 doubles) is first written at step ``at`` of 30, after the schedule was chosen for u and v
    (``loop``: Mixed in 2400 bytes, whose reverse part then held larger snapshots and records: 3072 bytes),
    or after ``while_loop`` chose to record steps (the copies the kept records were bound to make were
    not counted: 2560 bytes). The schedule outgrown is given up and the loop's reverse pass re-plans each
    gap in the memory then free: the peak within the budget, keeping every step's gradient, bit for bit."""
    step = _late_state(at)
    got, stats = grads(30, step=step, while_=while_, memory=budget)
    assert np.array_equal(np.concatenate(got), np.concatenate(grads(30, step=step, while_=while_)[0]))
    assert stats.peak_memory <= budget and stats.recomputed > 0


def test_the_measured_peak_is_the_memory_numpy_allocates():
    """tracemalloc sees numpy's allocations: the loop's peak is within the budget plus one step's working
    memory (shadows, temporaries), which a run of one step measures."""
    big = 4_000

    def traced(nsteps, memory):
        tracemalloc.start()
        _, stats = grads(nsteps, n=big, memory=memory)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return peak, stats

    working, _ = traced(1, "1GB")
    for budget in (20 * 8 * big, 60 * 8 * big):
        peak, stats = traced(40, budget)
        assert stats.peak_memory <= budget and stats.recomputed > 0
        assert peak <= working + budget


def test_a_step_kept_is_measured_without_walking_every_step_kept(monkeypatch):
    """The bookkeeping after each step looks at the steps whose copies changed, not at every step kept so far:
    the reads of steps' byte counts grow with the loop's length, not with its square (a keep-all run of a
    thousand steps spent a second walking them)."""
    reads = [0]
    slot = pad.tape.Account.bytes  # the slot's descriptor

    class Counted(pad.tape.Account):
        __slots__ = ()

        @property  # type: ignore[override]
        def bytes(self):
            reads[0] += 1
            return slot.__get__(self)

        @bytes.setter
        def bytes(self, value):
            slot.__set__(self, value)

    monkeypatch.setattr(pad.tape, "Account", Counted)
    per_step = {}
    for nsteps in (40, 160):
        reads[0] = 0
        got, stats = grads(nsteps, memory="1GB")
        assert (stats.schedule, stats.recomputed) == ("keep-all", 0)
        per_step[nsteps] = reads[0] / nsteps
    assert np.array_equal(np.concatenate(got), np.concatenate(grads(160)[0]))
    assert per_step[160] <= 1.5 * per_step[40], per_step


def test_a_budget_too_small_is_refused_with_the_sizes():
    with pytest.raises(checkpoint.BudgetError, match=r"memory=500 B is too small .* needs at least"):
        grads(10, memory=500)
    for bad in ("lots", "-5MB", "5 parsecs"):
        with pytest.raises(ValueError, match="memory: not a memory size"):
            grads(10, memory=bad)
    with pytest.raises(ValueError, match="snapshots or memory, not both"):
        grads(10, memory="1MB", snapshots=3)


@pytest.mark.parametrize(
    "text,size",
    [("512MB", 512 * 10**6), ("4GB", 4 * 10**9), ("2GiB", 2 * 2**30), ("100M", 100 * 2**20), ("1e3", None)],
)
def test_sizes(text, size):
    if size is None:
        with pytest.raises(ValueError):
            checkpoint.parse_size(text)
    else:
        assert checkpoint.parse_size(text) == size
    assert checkpoint.format_size(3_400_000) == "3.4 MB"


@pytest.mark.parametrize("n,slots", [(100, 8), (231, 16), (500, 32), (932, 64), (2000, 128)])
def test_online_snapshots_cost_close_to_the_offline_optimum(n, slots):
    """Dynamic placement, each gap then reversed by Revolve with the slots left, against offline Revolve."""
    dyn = plan.Dynamic(slots)
    dyn.start(0)
    for t in range(1, n):
        dyn.place(t)
    marks = sorted(dyn.levels)
    total = n + sum(
        plan.revolve_steps((marks[i + 1] if i + 1 < len(marks) else n) - a, slots - i)
        for i, a in enumerate(marks)
    )
    offline = plan.revolve_steps(n, slots)
    assert offline <= total <= 1.1 * offline


@pytest.mark.parametrize("budget", [1_000, 1_100, 2_400, 3_600])
@pytest.mark.parametrize("at", [3, 8, 15])
def test_a_counting_condition_is_asked_once_a_step(budget, at):
    """A ``while_loop`` condition that counts its own calls (a replayed step's Python cannot count) under a
    budget and an expected count, whatever the plan does: a schedule given up when the state grows goes on
    online from the step it was asked for (it was asked twice there: the loop ended a step early)."""
    step, n = _late_state(at), 30
    u, v, w = np.linspace(0.1, 1.0, N), np.linspace(-0.5, 0.5, N), np.zeros(N)
    asked = [0]

    def more(*_):
        asked[0] += 1
        return asked[0] <= n

    def f(u, v, w):
        checkpoint.while_loop(more, step, u, v, w, memory=budget, expected_steps=n)

    pad.autodiff(f, pad.Dup(u, np.zeros(N)), pad.Dup(v, np.ones(N)), pad.Dup(w, np.ones(N)))
    assert asked[0] == n + 1
