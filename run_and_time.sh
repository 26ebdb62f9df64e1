#!/bin/bash
# Time one training run on this node and print the MLPerf RESULT line.
#   DGXSYSTEM=DGXA100 ./run_and_time.sh [KEY VALUE ...]       # one node
#   srun --ntasks-per-node=1 ./run_and_time.sh                   # one task per node: bind_launch takes
#                                                                # nnodes/node_rank/master from Slurm
# Sources config_${DGXSYSTEM}.sh (unless SKIP_CONFIG=1), then runs
#   [profiler] python -m bind_launch ... ${TRAIN_SCRIPT} ${EXTRA_PARAMS} --config-file ... ${EXTRA_CONFIG} "$@"
# Variables (docs/cluster.md): DGXSYSTEM CONFIG_FILE DTYPE PATHS_CATALOG WEIGHTS DATADIR TRAIN_SCRIPT PYTHON
# NPROC_PER_NODE BIND_LAUNCH_ARGS EXTRA_PARAMS EXTRA_CONFIG LOGDIR PROFILE SUBMISSION_ORG ALLOW_NON_RCP.
# Before training, tools/check_recipe.py judges the effective recipe with mlperf-logging's rules and RCPs: a recipe
# that review would reject exits 1 here, naming the key and the rule (ALLOW_NON_RCP=1: a warning only).
# Exit code: training's.
set -euo pipefail
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
LOGDIR="${LOGDIR:-results}"
SUBMISSION_ORG="${SUBMISSION_ORG:-maskrcnn_benchmark}"
NODE_RANK="${SLURM_NODEID:-0}"
mkdir -p "${LOGDIR}"

train_args=(--config-file "${CONFIG_FILE}")
if [[ -n "${DTYPE}" ]]; then train_args+=(DTYPE "${DTYPE}"); fi
if [[ -n "${PATHS_CATALOG}" ]]; then train_args+=(PATHS_CATALOG "${PATHS_CATALOG}"); fi
if [[ -n "${WEIGHTS}" ]]; then train_args+=(MODEL.WEIGHT "${WEIGHTS}"); fi
if [[ -n "${DATADIR:-}" ]]; then train_args+=(DATASETS.DATA_DIR "${DATADIR}"); fi
train_args+=(DISABLE_REDUCED_LOGGING True)
read -r -a extra_params <<< "${EXTRA_PARAMS:-}"
read -r -a extra_config <<< "${EXTRA_CONFIG:-}"
read -r -a bind_args <<< "${BIND_LAUNCH_ARGS:-}"

launch=("${PYTHON}" -u -m bind_launch "--nproc_per_node=${NPROC_PER_NODE:-${DGXNGPU:-1}}")
if [[ -n "${DGXNSOCKET:-}" ]]; then launch+=("--nsockets_per_node=${DGXNSOCKET}"); fi
if [[ -n "${DGXSOCKETCORES:-}" ]]; then launch+=("--ncores_per_socket=${DGXSOCKETCORES}"); fi
if [[ "${DGXHT:-}" == 1 ]]; then launch+=(--no_hyperthreads); fi

prof=()
case "${PROFILE:-}" in
  "" | none) ;;
  nsys | ncu)
    if command -v "${PROFILE}" > /dev/null; then
      if [[ "${PROFILE}" == nsys ]]; then
        prof=(nsys profile "--trace=cuda,nvtx,osrt" --force-overwrite=true -o "${LOGDIR}/nsys_node${NODE_RANK}")
      else
        prof=(ncu --target-processes all --launch-skip "${NCU_SKIP:-1000}" --launch-count "${NCU_COUNT:-50}"
              -f -o "${LOGDIR}/ncu_node${NODE_RANK}")
      fi
    else
      echo "run_and_time: WARNING: PROFILE=${PROFILE} but ${PROFILE} is not installed; running unprofiled" >&2
    fi ;;
  torch | memory) export MASKRCNN_PROFILE="${PROFILE}" MASKRCNN_PROFILE_DIR="${LOGDIR}" ;;
  *) echo "run_and_time: unknown PROFILE=${PROFILE} (nsys|ncu|torch|memory)" >&2; exit 2 ;;
esac

# Refuse a recipe that MLPerf review would reject before any GPU hour is spent (skipped when the Slurm script
# checked it once for all trials: RECIPE_CHECKED=1).
if [[ "${RECIPE_CHECKED:-0}" != 1 ]]; then
  check=("${PYTHON}" tools/check_recipe.py
         "--world-size=$(( ${NPROC_PER_NODE:-${DGXNGPU:-1}} * ${SLURM_JOB_NUM_NODES:-${DGXNNODES:-1}} ))")
  if [[ "${ALLOW_NON_RCP:-0}" == 1 ]]; then check+=(--allow-non-rcp); fi
  "${check[@]}" "${extra_params[@]}" "${train_args[@]}" "${extra_config[@]}" "$@" || exit 1
fi
if [[ "${RECIPE_CHECK_ONLY:-0}" == 1 ]]; then exit 0; fi

start=$(date +%s)
start_fmt=$(date +'%Y-%m-%d %r')
echo "STARTING TIMING RUN AT ${start_fmt}"
ret=0
"${prof[@]}" "${launch[@]}" "${bind_args[@]}" "${TRAIN_SCRIPT}" "${extra_params[@]}" "${train_args[@]}" \
  "${extra_config[@]}" "$@" || ret=$?
end=$(date +%s)
echo "ENDING TIMING RUN AT $(date +'%Y-%m-%d %r')"
if [[ "${ret}" -ne 0 ]]; then
  echo "run_and_time: training exited with code ${ret}" >&2
  exit "${ret}"
fi
if [[ "${NODE_RANK}" == 0 ]]; then
  echo "RESULT,OBJECT_DETECTION,,$((end - start)),${SUBMISSION_ORG},${start_fmt}"
fi
