#!/bin/bash
# Sourced by slurm/submit.sh and slurm/run_experiments.sh. gpu_check_projection NODES PREFIX: when neither the
# environment nor the site file set DGXRUNMINUTES, take it from make gpu-check's projection for NODES nodes
# (GPU_CHECK_PROJECTION, default ${RESULTS_ROOT:-<checkout>/results}/gpu-check/projection.json, where
# slurm/gpu_check.sbatch leaves a copy of its own), and say so on a line that starts with PREFIX. Before the config
# is sourced: its DGXRUNMINUTES (on paper) is the last resort.
gpu_check_projection() {
  local nodes="$1" prefix="$2" minutes=""
  GPU_CHECK_PROJECTION="${GPU_CHECK_PROJECTION:-${RESULTS_ROOT:-${REPO}/results}/gpu-check/projection.json}"
  if [[ -n "${DGXRUNMINUTES:-}" || ! -f "${GPU_CHECK_PROJECTION}" ]]; then return 0; fi
  minutes="$(python3 - "${GPU_CHECK_PROJECTION}" "${nodes}" << 'PY' || true
import json, math, sys
nodes = json.load(open(sys.argv[1])).get("nodes", {})
entry = nodes.get(sys.argv[2])
if entry and entry.get("minutes"):
    print(math.ceil(float(entry["minutes"])))
PY
  )"
  if [[ -n "${minutes}" ]]; then
    export DGXRUNMINUTES="${minutes}"
    echo "${prefix}: DGXRUNMINUTES=${DGXRUNMINUTES} from make gpu-check's projection (${GPU_CHECK_PROJECTION})"
  fi
}
