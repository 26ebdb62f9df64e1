#!/bin/bash
# Sourced by slurm/submit.sh and slurm/run_experiments.sh. gpu_check_projection NODES PREFIX: when neither the
# environment nor the site file set DGXRUNMINUTES, take it from make gpu-check's projection for NODES nodes
# (GPU_CHECK_PROJECTION, default ${RESULTS_ROOT:-<checkout>/results}/gpu-check/projection.json, where
# slurm/gpu_check.sbatch leaves a copy of its own), and say so on a line that starts with PREFIX. Before the config
# is sourced: its DGXRUNMINUTES (on paper) is the last resort. make gpu-check's projection is of one system's
# recipes (its "system", DGXH100: a global batch per node count, and the epochs it takes), timed on the GPUs it ran
# on. A job of that system takes it, or of a system whose configs hold the same recipes (the DGXH200 configs hold
# the DGXH100 ones); another (DGXA100: GBS 64 on one node) does not, and says so; an EXTRA_CONFIG with another
# SOLVER.IMS_PER_BATCH neither. A projection that names no system (made by hand) is taken by any job.
gpu_check_projection() {
  local nodes="$1" prefix="$2" minutes="" system
  GPU_CHECK_PROJECTION="${GPU_CHECK_PROJECTION:-${RESULTS_ROOT:-${REPO}/results}/gpu-check/projection.json}"
  if [[ -n "${DGXRUNMINUTES:-}" || ! -f "${GPU_CHECK_PROJECTION}" ]]; then return 0; fi
  system="$(sed -E 's/_[0-9]+x[0-9]+x[0-9]+$//' <<< "${DGXSYSTEM:-DGXH100}")"  # DGXH100_4x8x4 -> DGXH100
  minutes="$(python3 - "${GPU_CHECK_PROJECTION}" "${nodes}" "${system}" "${REPO}" << 'PY' || true
import glob, json, math, os, re, sys
path, nodes, system, repo = sys.argv[1:5]
projection = json.load(open(path))
projected = projection.get("system")
entry = projection.get("nodes", {}).get(nodes) or {}


def recipes(name):
    """{nodes: global batch} of config_<name>*.sh (as gpu_check.config_batches reads them)."""
    out = {}
    for config in sorted(glob.glob(os.path.join(repo, "config_%s*.sh" % name))):
        text = open(config).read()
        n = re.search(r'DGXNNODES="\$\{DGXNNODES:-(\d+)\}"', text)
        b = re.search(r"SOLVER\.IMS_PER_BATCH (\d+)", text)
        if n and b:
            out.setdefault(n.group(1), int(b.group(1)))
    return out


override = re.findall(r"SOLVER\.IMS_PER_BATCH\s+(\d+)", os.environ.get("EXTRA_CONFIG", ""))  # the last counts
if projected and projected != system and recipes(system) != recipes(projected):
    print(f"for:the {projected} recipes, not {system}'s")
elif override and entry.get("global_batch") and int(override[-1]) != int(entry["global_batch"]):
    print(f"for:global batch {entry['global_batch']} on {nodes} node(s), not EXTRA_CONFIG's {override[-1]}")
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
