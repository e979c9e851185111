# Sourced by the batch scripts in slurm/ (from the repository root, where they cd): the site's modules, the
# venv, and how the ranks start. Safe under `set -euo pipefail` on bash 4.2 and later.
# Settings (environment, passed through by sbatch):
#   MODULES   modules to load first, e.g. MODULES="openmpi/4.1.6 python/3.11" (the site's MPI and Python)
#   VENV      the venv (default .venv): pad installed, and mpi4py for the MPI the ranks run on
#   LAUNCHER  how the ranks start, e.g. "srun --mpi=pmix" or "mpirun"; default: the venv's mpiexec where the
#             mpich wheel put one (its Hydra starts the ranks inside the allocation), else srun with the
#             site's default MPI plugin. USE_SRUN=1 means "srun --mpi=${SRUN_MPI:-pmi2}" (the mpich wheel
#             speaks PMI-2; Open MPI and most site MPIs PMIx: SRUN_MPI=pmix).
# Sets PYTHON (the venv's), LAUNCH (the launcher as an array; mpiexec-like ones get -n SLURM_NTASKS) and
# SRUN_STEP (srun for job steps: the launcher if it is srun, else srun with the mpich wheel's or the site's
# plugin), and prints one line saying where the job runs and on what.
# Partition, account, time and the like are sbatch's own: SBATCH_PARTITION=gpu SBATCH_ACCOUNT=proj123 sbatch ...

pad_script=${pad_script:-pad}
pad_modules_text=${MODULES:-}
if [[ -n "${pad_modules_text// /}" ]]; then
  if ! command -v module >/dev/null 2>&1; then
    for init in /etc/profile.d/lmod.sh /etc/profile.d/modules.sh /usr/share/lmod/lmod/init/bash; do
      if [[ -r "$init" ]]; then
        # shellcheck disable=SC1090
        source "$init"
        break
      fi
    done
  fi
  read -ra pad_modules <<<"$pad_modules_text"
  module load ${pad_modules[@]+"${pad_modules[@]}"}
fi
VENV=${VENV:-.venv}
if [[ ! -x "$VENV/bin/python" ]]; then
  echo "$pad_script: no Python at $VENV/bin/python: submit from the repository root after the README's" \
    "set-up step, or set VENV=/path/to/venv" >&2
  exit 2
fi
PYTHON=$VENV/bin/python
pad_launcher_text=${LAUNCHER:-}
if [[ -n "${pad_launcher_text// /}" ]]; then
  read -ra LAUNCH <<<"$pad_launcher_text"
elif [[ "${USE_SRUN:-0}" == 1 ]]; then
  LAUNCH=(srun "--mpi=${SRUN_MPI:-pmi2}")
elif [[ -x "$VENV/bin/mpiexec" ]]; then
  LAUNCH=("$VENV/bin/mpiexec")
else
  LAUNCH=(srun)
fi
if [[ "$(basename "${LAUNCH[0]}")" == srun ]]; then
  SRUN_STEP="${LAUNCH[*]}"
else
  LAUNCH+=(-n "${SLURM_NTASKS:-1}")
  if [[ -x "$VENV/bin/mpiexec" ]]; then SRUN_STEP="srun --mpi=pmi2"; else SRUN_STEP=srun; fi
fi
pad_mpi=$("$PYTHON" -c "import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI
print(' '.join(MPI.Get_library_version().split()[:3]))" 2>/dev/null || echo "no mpi4py")
echo "$pad_script: job ${SLURM_JOB_ID:-local}, partition ${SLURM_JOB_PARTITION:-none}," \
  "account ${SLURM_JOB_ACCOUNT:-none}, ${SLURM_NTASKS:-1} task(s) on ${SLURM_JOB_NUM_NODES:-1} node(s);" \
  "ranks started by ${LAUNCH[*]}; mpi4py's MPI: $pad_mpi"
