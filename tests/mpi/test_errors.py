"""Bad input gets a clear error on the ranks concerned, never a hang; one rank's failure fails the run."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pad
import pad.mpi

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(120)]


def test_float_integer_mismatch_between_two_ranks(comm):
    """Rank 0 sends floats, rank 1 receives integers: rank 0's adjoint receive finds an empty message
    and raises (instead of waiting for a shadow that will never come)."""
    if comm.size == 1:
        pytest.skip("needs two ranks")
    x = np.ones(4) if comm.rank == 0 else np.zeros(4, np.int64)

    def f(x):
        if comm.rank == 0:
            comm.Send(x, 1, 0)
        elif comm.rank == 1:
            comm.Recv(x, 0, 0)
        comm.Barrier()

    args = [pad.Dup(x, np.ones(4))] if comm.rank == 0 else [x, pad.Dup(np.ones(1), np.ones(1))]
    if comm.rank == 0:
        with pytest.raises(pad.mpi.MismatchError, match="differ in dtype or size"):
            pad.autodiff(f, *args)
    else:
        pad.autodiff(lambda x, _: f(x), *args)


def test_check_grad_fails_on_every_rank(comm):
    """Only the last rank computes something pad does not see (an in-place NumPy update of an array the
    program allocates; one of a pad.Dup array would be refused): every rank fails."""

    def f(x, y):
        t = np.zeros(3)
        comm.Allreduce(x, t)
        if comm.rank == comm.size - 1:
            t *= 1.5
        pad.copy(y, t)

    x, y = np.ones(3), np.zeros(3)
    with pytest.raises(AssertionError, match="check_grad failed"):
        pad.check_grad(f, pad.Dup(x, np.zeros(3)), pad.Dup(y, np.zeros(3)))


def test_one_failing_rank_fails_the_run(comm, tmp_path_factory):
    """mpiexec of a test that fails on rank 1 only exits non-zero (as scripts/test.sh relies on)."""
    if comm.rank == 0:
        folder = tmp_path_factory.mktemp("failing")
        (folder / "test_one_rank.py").write_text(
            textwrap.dedent(
                """
                import pytest
                from mpi4py import MPI

                @pytest.mark.mpi
                def test_fails_on_rank_1():
                    assert MPI.COMM_WORLD.Get_rank() != 1
                """
            )
        )
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PMI_", "HYDRA_", "HYDI_", "MPIR_", "MPI_"))
        }
        mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
        cmd = [
            mpiexec,
            "-n",
            "2",
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--with-mpi",
        ]
        run = subprocess.run([*cmd, str(folder)], env=env, capture_output=True, timeout=90, check=False)
        code = run.returncode
    else:
        code = None
    code = comm.mpi.bcast(code, root=0)
    assert code != 0
