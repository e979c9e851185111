#!/usr/bin/env bash
# The whole test suite: serial tests (two workers, a test file each: most of their time is numba compiling),
# the CUDA target under numba's simulator, then the MPI tests under mpiexec with 1, 2, 3 and 4 ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
MPIEXEC=${MPIEXEC:-$(dirname "$PY")/mpiexec}
export OMP_NUM_THREADS=1 PYTHONHASHSEED=0
"$PY" -m pytest -q -n "${PAD_TEST_WORKERS:-2}" --dist loadfile -m "not mpi" tests "$@"
echo "== CUDA target on numba's CUDA simulator"
NUMBA_ENABLE_CUDASIM=1 "$PY" -m pytest -q -p no:cacheprovider -m "gpu and not mpi" tests/gpu "$@"
if ls tests/mpi/test_*.py >/dev/null 2>&1; then
  for n in 1 2 3 4; do
    echo "== MPI tests on $n ranks"
    NUMBA_NUM_THREADS=1 timeout 900 "$MPIEXEC" -n "$n" "$PY" -m pytest -q -p no:cacheprovider --with-mpi -m mpi tests/mpi "$@"
  done
fi
