#!/usr/bin/env bash
# The scaling studies of issues 13 and 30, for a 16-core host (CPU studies) and a host with 2 or 8 GPUs (GPU
# studies), run from the checkout with PYTHONPATH=. (no install needed). Each study appends to OUT/<study>.jsonl.
#   bash scripts/studies.sh OUT [STUDY ...]      default: every study; `bash scripts/studies.sh -l` lists them
# Settings (environment): PYTHON (python3), MPIRUN (the MPI launcher, e.g. "srun --mpi=pmix"; default: scale's
# choice, $PAD_MPIEXEC or the mpiexec beside PYTHON or on PATH, checked against mpi4py's MPI before a study),
# TIMEOUT (seconds a point may take, 900), PAD_COMMIT (the commit to record where the checkout has no .git),
# MPS (1: the GPU studies run under NVIDIA's MPS, whose daemon each study starts and stops: scale's --mps).
# A failed point is recorded and the next one runs; the exit status is 1 if any point failed, and each
# study's failures are listed in OUT/studies.log.
set -uo pipefail

declare -A STUDY=(
  # miniBUDE bm1 (65,536 poses), primal and gradient with respect to the protein
  [minibude-threads]="minibude --kind threads --workers 1 2 4 8 16 --modes primal grad --iterations 5 -- --deck bm1"
  [minibude-ranks]="minibude --kind ranks --workers 1 2 4 8 16 --modes primal grad --iterations 5 -- --deck bm1"
  # LULESH, 50 cycles: threads at -s 45 and -s 60; ranks strong (-s 60 on 1 rank, -s 30 on 8) and weak (-s 30
  # per rank), and 8 ranks of 2 threads at -s 30 (issue 25)
  [lulesh-threads]="lulesh --kind threads --workers 1 2 4 8 16 --sizes 45 60 --iterations 50 --modes primal grad"
  [lulesh-ranks-strong]="lulesh --kind ranks --workers 1 8 --sizes 60 --iterations 50 --modes primal grad"
  [lulesh-ranks-weak]="lulesh --kind ranks --workers 1 8 --sizes 30 --scaling weak --iterations 50 --modes primal grad"
  [lulesh-ranks-threads]="lulesh --kind ranks --workers 8 --threads-per-rank 2 --sizes 30 --scaling weak --iterations 50 --modes primal grad"
  # GPUs: miniBUDE one rank per GPU. LULESH needs a cube number of ranks: 1 rank on 1 GPU, 8 ranks sharing 2
  # GPUs (4 each), 8 ranks on 8 GPUs (a failed point where the host has fewer); strong -s 120 (the whole-run
  # sensitivity too, 50 cycles with 32 snapshots: about 27 GB on one GPU), weak -s 60 per rank
  [minibude-gpus]="minibude --kind gpus --workers 1 2 --modes primal grad --iterations 5 -- --deck bm1"
  [lulesh-gpus-strong]="lulesh --kind gpus --workers 1 2 8 --ranks-per-gpu 1 4 1 --sizes 120 --iterations 50 --modes primal grad sensitivity"
  [lulesh-gpus-weak]="lulesh --kind gpus --workers 1 2 8 --ranks-per-gpu 1 4 1 --sizes 60 --scaling weak --iterations 50 --modes primal grad"
)
ORDER=(
  minibude-threads minibude-ranks lulesh-threads lulesh-ranks-strong lulesh-ranks-weak lulesh-ranks-threads
  minibude-gpus lulesh-gpus-strong lulesh-gpus-weak
)

if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
if [[ "${1:-}" == -l ]]; then
  for name in "${ORDER[@]}"; do echo "$name: python -m scripts.scale ${STUDY[$name]}"; done
  exit 0
fi
if [[ $# -lt 1 ]]; then
  echo "usage: bash scripts/studies.sh OUT [STUDY ...]   (-l lists the studies, -h explains)" >&2
  exit 2
fi
OUT=$(realpath -m "$1")
shift
studies=("$@")
if [[ ${#studies[@]} -eq 0 ]]; then studies=("${ORDER[@]}"); fi
for name in "${studies[@]}"; do
  if [[ -z "${STUDY[$name]+set}" ]]; then
    echo "studies.sh: no study $name (bash scripts/studies.sh -l lists them)" >&2
    exit 2
  fi
done

cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
status=0
launcher=()
if [[ -n "${MPIRUN:-}" ]]; then launcher=(--mpiexec "$MPIRUN"); fi
for name in "${studies[@]}"; do
  read -ra args <<<"${STUDY[$name]}"
  if [[ "${MPS:-0}" == 1 && " ${args[*]} " == *" --kind gpus "* ]]; then args=("${args[0]}" --mps "${args[@]:1}"); fi
  echo "== $name: $(date -u +%FT%TZ)" | tee -a "$OUT/studies.log"
  # ${launcher[@]+"${launcher[@]}"}: an empty array under set -u on bash < 4.4
  "$PYTHON" -m scripts.scale "${args[0]}" --out "$OUT/$name.jsonl" ${launcher[@]+"${launcher[@]}"} \
    --timeout "${TIMEOUT:-900}" "${args[@]:1}" 2>&1 | tee -a "$OUT/studies.log" || status=1
done
exit $status
