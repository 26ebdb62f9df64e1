#!/bin/bash
# Sourced by slurm/submit.sh and slurm/run_experiments.sh. gpu_check_projection NODES PREFIX: when neither the
# environment nor the site file set DGXRUNMINUTES, take it from make gpu-check's projection for NODES nodes
# (GPU_CHECK_PROJECTION, default ${RESULTS_ROOT:-<checkout>/results}/gpu-check/projection.json, where
# slurm/gpu_check.sbatch leaves a copy of its own), and say so on a line that starts with PREFIX. Before the config
# is sourced: its DGXRUNMINUTES (on paper) is the last resort. make gpu-check's projection is of one system's
# recipes (its "system", DGXH100): a global batch per node count (and the epochs it takes). A job whose config
# (EXTRA_CONFIG, else config_${DGXSYSTEM}.sh's) has the same global batch on NODES nodes takes it (the DGXH200 configs
# hold the DGXH100 recipes); another (DGXA100, GBS 64 on one node) does not, and says so. A projection without
# batches (made by hand) is taken by any job of its "system", or by any job when it names none.
gpu_check_projection() {
  local nodes="$1" prefix="$2" minutes="" system
  GPU_CHECK_PROJECTION="${GPU_CHECK_PROJECTION:-${RESULTS_ROOT:-${REPO}/results}/gpu-check/projection.json}"
  if [[ -n "${DGXRUNMINUTES:-}" || ! -f "${GPU_CHECK_PROJECTION}" ]]; then return 0; fi
  system="$(sed -E 's/_[0-9]+x[0-9]+x[0-9]+$//' <<< "${DGXSYSTEM:-DGXH100}")"  # DGXH100_4x8x4 -> DGXH100
  minutes="$(python3 - "${GPU_CHECK_PROJECTION}" "${nodes}" "${system}" "${REPO}/config_${DGXSYSTEM:-DGXH100}.sh" \
             << 'PY' || true
import json, math, os, re, sys
projection = json.load(open(sys.argv[1]))
projected = projection.get("system")  # none: a projection made by hand (or before it was recorded), for any job
entry = projection.get("nodes", {}).get(sys.argv[2]) or {}
config = os.environ.get("EXTRA_CONFIG", "")
if "SOLVER.IMS_PER_BATCH" not in config and os.path.isfile(sys.argv[4]):
    config = open(sys.argv[4]).read()
batch = re.search(r"SOLVER\.IMS_PER_BATCH (\d+)", config)
if entry.get("global_batch") and batch and int(batch.group(1)) != int(entry["global_batch"]):
    print(f"for:global batch {entry['global_batch']} on {sys.argv[2]} node(s) (the {projected or 'checked'} "
          f"recipes), {sys.argv[3]}'s is {batch.group(1)}")
elif not entry.get("global_batch") and projected and projected != sys.argv[3]:
    print(f"for:the {projected} recipes, not {sys.argv[3]}'s")
elif entry.get("minutes"):
    print(math.ceil(float(entry["minutes"])))
PY
  )"
  if [[ "${minutes}" == for:* ]]; then
    echo "${prefix}: make gpu-check's projection (${GPU_CHECK_PROJECTION}) is of ${minutes#for:}: DGXRUNMINUTES from the config"
  elif [[ -n "${minutes}" ]]; then
    export DGXRUNMINUTES="${minutes}"
    echo "${prefix}: DGXRUNMINUTES=${DGXRUNMINUTES} from make gpu-check's projection (${GPU_CHECK_PROJECTION})"
  fi
}
