#!/bin/bash
# Body of the Slurm batch scripts (slurm/*.sbatch): NEXP timed runs back to back in the current allocation,
# one log per run ($LOGDIR/result_<i>.txt), every node running run_and_time.sh once (srun, one task per node),
# inside the Singularity image or, with CONTAINER=none, on the host. Variables: docs/cluster.md.
set -euo pipefail

REPO="${REPO:-${SLURM_SUBMIT_DIR:-$PWD}}"
if [[ ! -x "${REPO}/run_and_time.sh" ]]; then
  echo "run_experiments: ${REPO} is not the maskrcnn checkout (submit from it, or set REPO=)" >&2
  exit 2
fi
cd "${REPO}"
export DGXSYSTEM="${DGXSYSTEM:-DGXA100}"
if [[ "${SKIP_CONFIG:-0}" != 1 ]]; then
  # shellcheck source=/dev/null
  source "./config_${DGXSYSTEM}.sh"  # NEXP and TRIAL_MINUTES (the per-trial time limit) come from it
fi
NEXP="${NEXP:-5}"
NNODES="${SLURM_JOB_NUM_NODES:-1}"
JOBID="${SLURM_JOB_ID:-0}"
export LOGDIR="${LOGDIR:-${REPO}/results/${SLURM_JOB_NAME:-maskrcnn}-${JOBID}}"
CONTAINER="${CONTAINER:-${REPO}/singularity/maskrcnn.sif}"
CLEAR_CACHES="${CLEAR_CACHES:-1}"
DROP_CACHES_CMD="${DROP_CACHES_CMD:-sync && echo 3 > /proc/sys/vm/drop_caches}"
mkdir -p "${LOGDIR}"

mapfile -t hosts < <(scontrol show hostnames "${SLURM_JOB_NODELIST:-$(hostname)}")
if [[ "${#hosts[@]}" -eq 0 ]]; then hosts=("$(hostname)"); fi
export MASTER_ADDR="${MASTER_ADDR:-${hosts[0]}}"
port0="${MASTER_PORT:-$((29500 + JOBID % 1000))}"
read -r -a srun_extra <<< "${SRUN_ARGS:-}"
srun_cmd=(srun "--nodes=${NNODES}" --ntasks-per-node=1 --kill-on-bad-exit=1 --cpu-bind=none "${srun_extra[@]}")
# Each trial has its own time limit: Slurm sends SIGTERM (the trainer logs run_stop aborted and exits), then
# SIGKILL after KillWait, and the next trial starts; one hung trial cannot eat the others' time.
train_cmd=("${srun_cmd[@]}")
if [[ -n "${TRIAL_MINUTES:-}" ]]; then train_cmd+=("--time=${TRIAL_MINUTES}"); fi

if [[ "${CONTAINER}" == none ]]; then
  run_cmd=("${REPO}/run_and_time.sh")
else
  SINGULARITY="${SINGULARITY:-$(command -v singularity || command -v apptainer || echo singularity)}"
  DATADIR="${DATADIR:-/data}"
  WEIGHTS_DIR="${WEIGHTS_DIR:-/coco/models}"
  mounts=(-B "${DATADIR}:/data" -B "${LOGDIR}:/results" -B "${WEIGHTS_DIR}:/coco/models")
  if [[ -n "${CONTAINER_MOUNTS:-}" ]]; then mounts+=(-B "${CONTAINER_MOUNTS}"); fi
  run_cmd=("${SINGULARITY}" exec --nv "${mounts[@]}" --pwd "${CONTAINER_WORKDIR:-/workspace/object_detection}"
           "${CONTAINER}" env DATADIR=/data LOGDIR=/results ./run_and_time.sh)
fi

# The recipe, judged once for all trials before any GPU hour is spent (run_and_time.sh -> tools/check_recipe.py,
# in the image): a recipe that MLPerf review would reject ends the job here. ALLOW_NON_RCP=1 warns only.
if ! RECIPE_CHECK_ONLY=1 "${run_cmd[@]}"; then
  echo "run_experiments: the recipe of ${DGXSYSTEM} was refused (above); no trial started" >&2
  exit 1
fi
export RECIPE_CHECKED=1

echo "run_experiments: job ${JOBID} nodes=${NNODES} (${hosts[*]}) system=${DGXSYSTEM} nexp=${NEXP}"
echo "run_experiments: master=${MASTER_ADDR} logdir=${LOGDIR} container=${CONTAINER} trial limit=${TRIAL_MINUTES:-none} min"
status=0
for ((i = 0; i < NEXP; i++)); do
  export MASTER_PORT=$((port0 + i))
  log="${LOGDIR}/result_${i}.txt"
  rc=0
  {
    echo "Beginning trial $((i + 1)) of ${NEXP}"
    # The trainer logs cache_clear once, true only when the caches were really dropped on every node.
    export MLPERF_CACHE_CLEARED=0
    if [[ "${CLEAR_CACHES}" == 1 ]]; then
      if "${srun_cmd[@]}" bash -c "${DROP_CACHES_CMD}"; then
        export MLPERF_CACHE_CLEARED=1
      else
        echo "run_experiments: WARNING: cache clearing failed" >&2
      fi
    fi
    "${train_cmd[@]}" "${run_cmd[@]}"
  } 2>&1 | tee "${log}" || rc=$?
  echo "run_experiments: trial $((i + 1)) exit code ${rc}, log ${log}"
  if [[ "${rc}" -ne 0 ]]; then status="${rc}"; fi
done
exit "${status}"
