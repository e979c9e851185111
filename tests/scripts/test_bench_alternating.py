"""The benchmarks that time a gradient against its primal alternating in one process: what they report."""

from __future__ import annotations

import numba
import pytest

from apps.lulesh import kernels
from apps.minibude.deck import synthetic_deck
from apps.minibude.driver import Docking
from pad.parallel import driver
from scripts import bench_lulesh
from scripts.bench_lulesh import cycle_ratio, driver_study, per_launcher, row_profile, thread_speedup
from scripts.bench_minibude import alternate


@pytest.fixture
def one_thread():
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    yield
    numba.set_num_threads(before)


def _best_and_median(row: dict, primal: str, gradient: str) -> None:
    """Best rounds at most the medians, and each ratio the gradient's time over the primal's."""
    assert 0 < row[f"{primal}_s"] <= row[f"{primal}_median_s"]
    assert 0 < row[f"{gradient}_s"] <= row[f"{gradient}_median_s"]
    assert row["ratio"] == pytest.approx(row[f"{gradient}_s"] / row[f"{primal}_s"])
    assert row["median_ratio"] == pytest.approx(row[f"{gradient}_median_s"] / row[f"{primal}_median_s"])


def test_luleshs_per_cycle_ratio(one_thread):
    row = cycle_ratio(3, 1, cycles=2, rounds=3)
    assert (row["size"], row["threads"], row["cycles"], row["rounds"]) == (3, 1, 2, 3)
    row |= {"primal_s": row["primal_cycle_s"], "gradient_s": row["gradient_cycle_s"]}
    _best_and_median(row, "primal", "gradient")


def test_luleshs_cycles_with_the_driver_and_without(one_thread):
    """Both LULESHs report their cycles; only the one recorded with the driver replays by programs."""
    row = driver_study(3, 1, cycles=2, rounds=3)
    assert row["driver"]["programs"] > 0 and row["no_driver"]["programs"] == 0 and driver.ENABLED
    for name in ("driver", "no_driver"):
        times = row[name] | {
            "primal_s": row[name]["primal_cycle_s"],
            "gradient_s": row[name]["gradient_cycle_s"],
        }
        assert 0 < times["primal_s"] <= times["primal_median_s"]
        assert 0 < times["gradient_s"] <= times["gradient_median_s"]
        assert times["ratio"] == pytest.approx(times["gradient_s"] / times["primal_s"])


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="one thread is all numba has")  # type: ignore[attr-defined]
def test_luleshs_speedup_alternates_the_thread_counts():
    row = thread_speedup(3, [1, 2], cycles=2, rounds=2)
    assert (row["threads"], row["cycles"], row["rounds"]) == ([1, 2], 2, 2)
    for name in ("primal", "gradient"):
        times, speedup = row[f"{name}_cycle_s"], row[f"{name}_speedup"]
        assert set(times) == set(speedup) == {"1", "2"} and min(times.values()) > 0
        assert speedup["1"] == 1.0 and speedup["2"] == pytest.approx(times["1"] / times["2"])
    assert numba.get_num_threads() == 2


def test_alternating_rounds_warm_each_count_and_swap_which_mode_runs_first():
    """After each switch of the thread count, one untimed cycle of each mode, then both modes' timed cycles,
    the primal first in even rounds and the gradient first in odd ones; cycle numbers never repeat; the
    largest count set again after."""
    ran: list[tuple[int, str]] = []

    class Hydro:
        def later_increment(self, state):
            pass

        def replayed_leapfrog(self, state):
            ran.append((numba.get_num_threads(), "primal"))

        def check(self, t):
            pass

    def gradient(state):
        ran.append((numba.get_num_threads(), "gradient"))

    threads = [1, min(2, numba.config.NUMBA_NUM_THREADS)]  # type: ignore[attr-defined]
    timed, cycles = [], []
    for r, n, name, leapfrog, t in bench_lulesh._alternating(Hydro(), None, gradient, threads, 2, 3, 10):
        timed.append((r, n, name))
        cycles.append(t)
        before = len(ran)
        bench_lulesh._lap(Hydro(), None, leapfrog, 3, t)
        assert ran[before:] == [(n, name)] * 3
    orders = [("primal", "gradient"), ("gradient", "primal"), ("primal", "gradient")]
    assert timed == [(r, n, name) for r in range(3) for n in threads for name in orders[r]]
    warm = [[(n, "primal"), (n, "gradient")] for _ in range(3) for n in threads]
    assert [ran[k * 8 : k * 8 + 2] for k in range(6)] == warm
    assert cycles == sorted(set(cycles)) and cycles[0] == 10 + 4 + 2
    assert numba.get_num_threads() == max(threads)


def test_luleshs_rows_profiled_per_thread_count():
    """Each cycle's program rows, named by what they run, their spans within the cycle; the gradient's adjoint
    rows in its profile only; the driver unprofiled after."""
    threads = [1, min(2, numba.config.NUMBA_NUM_THREADS)]  # type: ignore[attr-defined]
    row = row_profile(3, threads, cycles=2, rounds=2)
    assert set(row["rows"]) == {f"{n}:{name}" for n in threads for name in ("primal", "gradient")}
    for key, rows in row["rows"].items():
        what = [r["what"] for r in rows]
        assert "k_element_forces (primal)" in what
        assert any(w.endswith("(adjoint)") for w in what) == key.endswith("gradient")
        assert all(r["span_s"] >= 0 and r["parts_s"] > 0 and r["waiting_s"] >= 0 for r in rows)
    assert driver.PROFILE is None and numba.get_num_threads() == max(threads)


def test_luleshs_launchers_timed_one_by_one(one_thread):
    """Each cycle's launchers, the adjoints in the gradient's only, within its cycle; the launchers and the
    driver as they were after."""
    row = per_launcher(3, 1, cycles=2, rounds=2)
    primal, gradient = row["primal_launchers_s"], row["gradient_launchers_s"]
    assert "k_element_forces (primal)" in primal and "k_element_forces (adjoint)" in gradient
    assert not any(name.endswith("(adjoint)") for name in primal)
    assert 0 < sum(primal.values()) <= row["primal_cycle_s"]
    assert 0 < sum(gradient.values()) <= row["gradient_cycle_s"]
    assert list(gradient.values()) == sorted(gradient.values(), reverse=True)
    variants = [v for k in vars(kernels).values() for v in getattr(k, "_variants", {}).values()]
    assert variants and driver.ENABLED
    assert not any(v.launcher.__qualname__.startswith("_timed.") for v in variants)


def test_minibudes_alternating_ratio(one_thread):
    dock = Docking(synthetic_deck(nposes=64), ppwi=64, device="cpu", comm=None, wrt="protein")
    _best_and_median(alternate(dock, "protein", rounds=3), "energies", "gradient")
