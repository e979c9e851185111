"""bench_sensitivity's record of several runs of a case."""

from scripts.bench_sensitivity import median_run


def _run(overhead: float, status: int = 0) -> dict:
    return {"status": status, "overhead": overhead}


def test_several_runs_record_the_median_run_and_every_overhead() -> None:
    kept = median_run([_run(6.4), _run(5.1), _run(9.0)])
    assert kept["overhead"] == 6.4 and kept["overheads"] == [6.4, 5.1, 9.0]
    assert median_run([_run(7.0), _run(5.0)])["overhead"] == 5.0  # the lower middle of two


def test_a_failed_run_is_the_record() -> None:
    assert median_run([_run(5.0), _run(0.0, status=1)])["status"] == 1
