#!/bin/bash
# Sourced by slurm/submit.sh and slurm/run_experiments.sh. gpu_check_projection NODES PREFIX: when neither the
# environment nor the site file set DGXRUNMINUTES, take it from make gpu-check's projection for NODES nodes
# (GPU_CHECK_PROJECTION, default ${RESULTS_ROOT:-<checkout>/results}/gpu-check/projection.json, where
# slurm/gpu_check.sbatch leaves a copy of its own), and say so on a line that starts with PREFIX. Before the config
# is sourced: its DGXRUNMINUTES (on paper) is the last resort. make gpu-check's projection is of one system's
# recipes (its "system", DGXH100: their global batches and epochs): a job of another DGXSYSTEM (DGXA100, GBS 64)
# does not take it, and says so.
gpu_check_projection() {
  local nodes="$1" prefix="$2" minutes="" system
  GPU_CHECK_PROJECTION="${GPU_CHECK_PROJECTION:-${RESULTS_ROOT:-${REPO}/results}/gpu-check/projection.json}"
  if [[ -n "${DGXRUNMINUTES:-}" || ! -f "${GPU_CHECK_PROJECTION}" ]]; then return 0; fi
  system="$(sed -E 's/_[0-9]+x[0-9]+x[0-9]+$//' <<< "${DGXSYSTEM:-DGXH100}")"  # DGXH100_4x8x4 -> DGXH100
  minutes="$(python3 - "${GPU_CHECK_PROJECTION}" "${nodes}" "${system}" << 'PY' || true
import json, math, sys
projection = json.load(open(sys.argv[1]))
projected = projection.get("system")  # none: a projection made by hand (or before it was recorded), for any job
if projected and projected != sys.argv[3]:
    print(f"for:{projected}")
else:
    entry = projection.get("nodes", {}).get(sys.argv[2])
    if entry and entry.get("minutes"):
        print(math.ceil(float(entry["minutes"])))
PY
  )"
  if [[ "${minutes}" == for:* ]]; then
    echo "${prefix}: make gpu-check's projection (${GPU_CHECK_PROJECTION}) is of the ${minutes#for:} recipes, not ${system}'s: DGXRUNMINUTES from the config"
  elif [[ -n "${minutes}" ]]; then
    export DGXRUNMINUTES="${minutes}"
    echo "${prefix}: DGXRUNMINUTES=${DGXRUNMINUTES} from make gpu-check's projection (${GPU_CHECK_PROJECTION})"
  fi
}
