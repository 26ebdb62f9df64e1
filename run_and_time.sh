#!/bin/bash
# Time one training run on this node and print the MLPerf RESULT line.
#   DGXSYSTEM=DGXA100 ./run_and_time.sh [KEY VALUE ...]       # one node
#   srun --ntasks-per-node=1 --cpu-bind=none ./run_and_time.sh   # one task per node: bind_launch takes
#                                                                # nnodes/node_rank/master from Slurm
# Sources config_${DGXSYSTEM}.sh (unless SKIP_CONFIG=1), then runs
#   [profiler] python -m bind_launch ... ${TRAIN_SCRIPT} ${EXTRA_PARAMS} --config-file ... ${EXTRA_CONFIG} "$@"
# Variables (docs/cluster.md): DGXSYSTEM CONFIG_FILE DTYPE PATHS_CATALOG WEIGHTS DATADIR TRAIN_SCRIPT PYTHON
# NPROC_PER_NODE BIND_LAUNCH_ARGS EXTRA_PARAMS EXTRA_CONFIG LOGDIR TRIAL_NAME OUTPUT_DIR PROFILE
# MLPERF_SUBMISSION_ORG ALLOW_NON_RCP PREFLIGHT_ONLY PREFLIGHT_NNODES PREFLIGHT_DONE PREFLIGHT_GPUS_ELSEWHERE
# NOT_CONVERGED_EXIT_CODE.
# Before training, tools/preflight.py checks what would end the run (the recipe against mlperf-logging's rules and
# RCPs, the batch against the processes, the GPUs, the data and weights paths) and exits with its own code for
# each cause (maskrcnn_benchmark/cli/exit_codes.py); PREFLIGHT_ONLY=1 stops after it (the Slurm job runs that once
# before its trials, on the batch host or, under pyxis, in a 1-node step, for all its nodes: PREFLIGHT_NNODES; then
# sets PREFLIGHT_DONE=1 for its trials). Exit code: training's (not converged:
# NOT_CONVERGED_EXIT_CODE, default 3).
# The run writes only under LOGDIR: its OUTPUT_DIR is LOGDIR/TRIAL_NAME (default LOGDIR/output), so the code may
# live on a read-only filesystem (a container image).
set -euo pipefail
# bash before 4.4 (RHEL/CentOS 7's 4.2) calls an empty array unbound under set -u: there, without it
((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] >= 404)) || set +u
LOGDIR="$(realpath -m "${LOGDIR:-results}")"  # relative to where it was started
for path_var in DATADIR WEIGHTS; do  # the same for a data or weights path given relative (not a catalog:// name)
  if [[ -n "${!path_var:-}" && "${!path_var}" != /* && "${!path_var}" != *://* ]]; then
    printf -v "${path_var}" '%s' "$(realpath -m "${!path_var}")"
  fi
done
cd "$(dirname "${BASH_SOURCE[0]}")"

DGXSYSTEM="${DGXSYSTEM:-DGXA100}"
if [[ "${SKIP_CONFIG:-0}" != 1 ]]; then
  # shellcheck source=/dev/null
  source "./config_${DGXSYSTEM}.sh"
fi

PYTHON="${PYTHON:-$(command -v python || command -v python3)}"
TRAIN_SCRIPT="${TRAIN_SCRIPT:-tools/train_mlperf.py}"
CONFIG_FILE="${CONFIG_FILE:-configs/e2e_mask_rcnn_R_50_FPN_1x.yaml}"
DTYPE="${DTYPE-float16}"
PATHS_CATALOG="${PATHS_CATALOG-maskrcnn_benchmark/config/paths_catalog_dbcluster.py}"
WEIGHTS="${WEIGHTS-/coco/models/R-50.pkl}"
OUTPUT_DIR="${OUTPUT_DIR:-${LOGDIR}/${TRIAL_NAME:-output}}"
NODE_RANK="${SLURM_NODEID:-0}"
mkdir -p "${LOGDIR}"

train_args=(--config-file "${CONFIG_FILE}" OUTPUT_DIR "${OUTPUT_DIR}")
if [[ -n "${DTYPE}" ]]; then train_args+=(DTYPE "${DTYPE}"); fi
if [[ -n "${PATHS_CATALOG}" ]]; then train_args+=(PATHS_CATALOG "${PATHS_CATALOG}"); fi
if [[ -n "${WEIGHTS}" ]]; then train_args+=(MODEL.WEIGHT "${WEIGHTS}"); fi
if [[ -n "${DATADIR:-}" ]]; then train_args+=(DATASETS.DATA_DIR "${DATADIR}"); fi
train_args+=(DISABLE_REDUCED_LOGGING True)
# every word of every line (read -a alone stops at the first newline: a recipe written over two lines lost the rest)
read -r -d '' -a extra_params <<< "${EXTRA_PARAMS:-}" || true
read -r -d '' -a extra_config <<< "${EXTRA_CONFIG:-}" || true
read -r -d '' -a bind_args <<< "${BIND_LAUNCH_ARGS:-}" || true

launch=("${PYTHON}" -u -m bind_launch "--nproc_per_node=${NPROC_PER_NODE:-${DGXNGPU:-1}}")
if [[ -n "${DGXNSOCKET:-}" ]]; then launch+=("--nsockets_per_node=${DGXNSOCKET}"); fi
if [[ -n "${DGXSOCKETCORES:-}" ]]; then launch+=("--ncores_per_socket=${DGXSOCKETCORES}"); fi
if [[ "${DGXHT:-}" == 1 ]]; then launch+=(--no_hyperthreads); fi

# Profiles go to the run's own OUTPUT_DIR: the trials of a job share LOGDIR, and the next one would overwrite them.
prof=()
if [[ -n "${PROFILE:-}" && "${PROFILE}" != none ]]; then mkdir -p "${OUTPUT_DIR}"; fi
case "${PROFILE:-}" in
  "" | none) ;;
  nsys | ncu)
    if command -v "${PROFILE}" > /dev/null; then
      if [[ "${PROFILE}" == nsys ]]; then
        prof=(nsys profile "--trace=cuda,nvtx,osrt" --force-overwrite=true -o "${OUTPUT_DIR}/nsys_node${NODE_RANK}")
      else
        prof=(ncu --target-processes all --launch-skip "${NCU_SKIP:-1000}" --launch-count "${NCU_COUNT:-50}"
              -f -o "${OUTPUT_DIR}/ncu_node${NODE_RANK}")
      fi
    else
      echo "run_and_time: WARNING: PROFILE=${PROFILE} but ${PROFILE} is not installed; running unprofiled" >&2
    fi ;;
  torch | memory) export MASKRCNN_PROFILE="${PROFILE}" MASKRCNN_PROFILE_DIR="${OUTPUT_DIR}" ;;
  *) echo "run_and_time: unknown PROFILE=${PROFILE} (nsys|ncu|torch|memory)" >&2; exit 1 ;;  # bad input
esac

# Everything that would end the run, checked before any rank starts (tools/preflight.py; its exit code names the
# cause). Skipped when the Slurm job checked it once for all trials (PREFLIGHT_DONE=1); the trainer still checks
# the paths, the batch and the GPUs before init_start.
nproc="${NPROC_PER_NODE:-${DGXNGPU:-1}}"
if [[ "${PREFLIGHT_DONE:-0}" != 1 ]]; then
  # the nodes bind_launch starts processes on: the step's, else the job's (the batch host, before the trials'
  # steps), else 1; PREFLIGHT_NNODES: the Slurm job's own preflight, for its trials (a 1-node step under pyxis)
  nnodes="${PREFLIGHT_NNODES:-${SLURM_STEP_NUM_NODES:-${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}}}"
  check=("${PYTHON}" tools/preflight.py "--world-size=$(( nproc * nnodes ))"
         "--nproc-per-node=${nproc}")
  if [[ "${ALLOW_NON_RCP:-0}" == 1 ]]; then check+=(--allow-non-rcp); fi
  # tools/submit.py's preflight on the host that submits (a login node): the GPUs are the job's nodes'
  if [[ "${PREFLIGHT_GPUS_ELSEWHERE:-0}" == 1 ]]; then check+=(--gpus-elsewhere); fi
  "${check[@]}" "${extra_params[@]}" "${train_args[@]}" "${extra_config[@]}" "$@"
fi
if [[ "${PREFLIGHT_ONLY:-0}" == 1 ]]; then exit 0; fi

start=$(date +%s)
start_fmt=$(date +'%Y-%m-%d %r')
echo "STARTING TIMING RUN AT ${start_fmt}"
# A stop (Slurm's time limit or scancel signal every process of the step; a container runtime may signal only this
# script) must not end this shell before the launcher: Slurm kills what is left of a step once its task (this
# shell) has exited, the trainers in their cleanup before run_stop aborted is logged. The launcher runs in the
# background (its stdin /dev/null: nothing reads it), the signal is forwarded to it (a second copy is harmless:
# bind_launch stops once), and the shell waits for its exit code.
"${prof[@]}" "${launch[@]}" "${bind_args[@]}" "${TRAIN_SCRIPT}" "${extra_params[@]}" "${train_args[@]}" \
  "${extra_config[@]}" "$@" &
launcher=$!
forwarded=0
for sig in TERM INT HUP USR1 USR2; do
  # shellcheck disable=SC2064  # the signal's name and the launcher's pid, fixed now
  trap "forwarded=1; kill -s ${sig} ${launcher} 2> /dev/null || true" "${sig}"
done
while :; do
  forwarded=0
  ret=0
  wait "${launcher}" || ret=$?
  if [[ "${forwarded}" == 0 ]]; then break; fi  # the launcher's own exit code
  # a trapped signal ends `wait` early: wait again, for the launcher's exit code (kept by bash once it has ended)
  if ! kill -0 "${launcher}" 2> /dev/null; then
    again=0
    wait "${launcher}" 2> /dev/null || again=$?
    if [[ "${again}" -ne 127 ]]; then ret="${again}"; fi  # 127: the first wait had it already
    break
  fi
done
trap - TERM INT HUP USR1 USR2
end=$(date +%s)
echo "ENDING TIMING RUN AT $(date +'%Y-%m-%d %r')"
if [[ "${ret}" -eq 3 ]]; then
  # Not converged (SOLVER.MAX_ITER reached): an outcome every rank reaches at the same iteration, not a crash.
  # Under srun --kill-on-bad-exit the first node to exit 3 would kill the others mid-exit, so the Slurm job asks
  # for NOT_CONVERGED_EXIT_CODE=0 and reads the outcome from this line.
  echo "run_and_time: not converged: training ended without reaching its quality target (exit code 3)" >&2
  exit "${NOT_CONVERGED_EXIT_CODE:-3}"
fi
if [[ "${ret}" -ne 0 ]]; then
  echo "run_and_time: training exited with code ${ret}" >&2
  exit "${ret}"
fi
if [[ "${NODE_RANK}" == 0 ]]; then
  echo "RESULT,OBJECT_DETECTION,,$((end - start)),${MLPERF_SUBMISSION_ORG:-reference-implementation},${start_fmt}"
fi
