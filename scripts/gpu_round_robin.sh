#!/usr/bin/env bash
# Runs a command on one GPU chosen round-robin by the MPI rank's node-local index: CUDA_VISIBLE_DEVICES becomes
# the visible GPU at index (local rank mod the number of GPUs), so ranks share GPUs when they outnumber them
# (8 ranks on 2 GPUs: local ranks 0 2 4 6 on the first, 1 3 5 7 on the second). The visible GPUs are the
# list CUDA_VISIBLE_DEVICES holds where it is set, else every GPU nvidia-smi lists; `--gpus N` takes the
# first N of them. The local rank comes from Open MPI, MPICH's Hydra or srun. The apps pick their GPU by the
# same rule without this wrapper (apps.cli.gpu_for); with it, each process sees, and creates its CUDA context
# on, its own GPU only. scripts/scale.py --kind gpus starts the apps through it:
#   mpirun -n 8 bash scripts/gpu_round_robin.sh --gpus 2 python -m apps.lulesh -s 30 --device gpu
set -euo pipefail
want=
if [[ "${1:-}" == --gpus ]]; then
  want=${2:-}
  if ! [[ "$want" =~ ^[1-9][0-9]*$ ]]; then
    echo "gpu_round_robin.sh: --gpus ${want}: expected a number of GPUs (1 or more)" >&2
    exit 2
  fi
  shift 2
fi
rank=${OMPI_COMM_WORLD_LOCAL_RANK:-${MPI_LOCALRANKID:-${SLURM_LOCALID:-0}}}
if [[ -n "${CUDA_VISIBLE_DEVICES+set}" ]]; then
  IFS=, read -ra gpus <<<"$CUDA_VISIBLE_DEVICES"
else
  mapfile -t gpus < <(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | tr -d ' ' || true)
fi
if ((${#gpus[@]} == 0)); then
  echo "gpu_round_robin.sh: node-local rank $rank: no GPU is visible (CUDA_VISIBLE_DEVICES, nvidia-smi)" >&2
  exit 3
fi
if [[ -n "$want" ]]; then
  if ((want > ${#gpus[@]})); then
    echo "gpu_round_robin.sh: --gpus $want: only ${#gpus[@]} GPU(s) visible (${gpus[*]})" >&2
    exit 3
  fi
  gpus=("${gpus[@]:0:want}")
fi
export CUDA_VISIBLE_DEVICES=${gpus[rank % ${#gpus[@]}]}
exec "$@"
