#!/usr/bin/env bash
# Runs a command on one GPU per MPI rank: CUDA_VISIBLE_DEVICES becomes the GPU at this rank's node-local index
# among the visible ones (the list CUDA_VISIBLE_DEVICES held, else every GPU nvidia-smi lists). The local rank
# comes from Open MPI, MPICH's Hydra or srun. scripts/scale.py --kind gpus starts the apps through it:
#   mpirun -n 2 bash scripts/one_gpu_per_rank.sh python -m apps.minibude --device gpu
set -euo pipefail
rank=${OMPI_COMM_WORLD_LOCAL_RANK:-${MPI_LOCALRANKID:-${SLURM_LOCALID:-0}}}
if [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]]; then
  IFS=, read -ra gpus <<<"$CUDA_VISIBLE_DEVICES"
else
  mapfile -t gpus < <(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null || true)
fi
if ((rank >= ${#gpus[@]})); then
  echo "one_gpu_per_rank.sh: node-local rank $rank has no GPU of its own (${#gpus[@]} visible)" >&2
  exit 3
fi
export CUDA_VISIBLE_DEVICES=${gpus[$rank]}
exec "$@"
