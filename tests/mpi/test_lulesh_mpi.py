"""LULESH under MPI: a cube of ranks runs (results as the serial run of the whole mesh); any other count
is a one-line error on rank 0 and status 2 on every rank. Run at 1 to 4 ranks by ``scripts/test.sh``."""

from __future__ import annotations

import json

import pytest

from apps.lulesh import __main__ as cli

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(300)]


def test_a_cube_of_ranks_runs_and_any_other_count_is_refused(comm, everywhere, capsys, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"lulesh{comm.rank}") / "r.json"
    status = cli.main(["-s", "3", "-q", "--json", str(out)])
    err = capsys.readouterr().err
    if comm.size in (1, 8):
        assert everywhere(status == 0)
        if comm.rank == 0:
            r = json.loads(out.read_text())
            edge = 3 * round(comm.size ** (1 / 3))
            assert r["valid"] and r["checks"]["reference"]["iterations"] == cli.REFERENCE[(edge, None)][0]
    else:
        assert everywhere(status == 2)
        said = f"lulesh: error: the number of MPI ranks must be a cube of an integer (1, 8, 27, ...), got {comm.size}\n"
        assert everywhere(err == (said if comm.rank == 0 else ""))
