#!/bin/bash
# Submit a batch script with the site file's settings (partition, account, QoS, GPU request syntax, time):
#   slurm/submit.sh [slurm/maskrcnn_4node.sbatch] [more sbatch options]
#   PILOT=1 slurm/submit.sh ...     # one trial with a generous limit: measures DGXRUNMINUTES
# Reads SITE_CONFIG (default ./site.sh) and config_<DGXSYSTEM>.sh (DGXNNODES, WALLTIME). The batch script's own
# "#SBATCH --gpus-per-node=8" is replaced by GPU_REQUEST (e.g. --gres=gpu:h100:8, or nothing). Prints the job id.
set -euo pipefail
# bash before 4.4 (RHEL/CentOS 7's 4.2) calls an empty array unbound under set -u: there, without it
((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] >= 404)) || set +u
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO}"
SITE_CONFIG="${SITE_CONFIG:-${REPO}/site.sh}"
if [[ -f "${SITE_CONFIG}" ]]; then
  # shellcheck source=/dev/null
  source "${SITE_CONFIG}"
fi
script="slurm/maskrcnn_4node.sbatch"
if [[ $# -gt 0 && "$1" != -* ]]; then script="$1"; shift; fi
[[ -f "${script}" ]] || { echo "error: no batch script ${script}" >&2; exit 1; }
default_system="$(sed -n 's/^export DGXSYSTEM="\${DGXSYSTEM:-\(.*\)}"$/\1/p' "${script}")"
export DGXSYSTEM="${DGXSYSTEM:-${default_system:-DGXH100_4x8x4}}"
[[ -f "config_${DGXSYSTEM}.sh" ]] || { echo "error: no config_${DGXSYSTEM}.sh (DGXSYSTEM)" >&2; exit 1; }
# make gpu-check's projection for the config's nodes, before the config's own DGXRUNMINUTES (on paper): the job's
# time limit and its trials' come from it, and the job inherits the value
# shellcheck source=slurm/projection.sh
source "${REPO}/slurm/projection.sh"
gpu_check_projection "$(DGXRUNMINUTES=1 bash -c 'source "./config_${DGXSYSTEM}.sh" > /dev/null; echo "${DGXNNODES}"')" \
  submit >&2
# shellcheck source=/dev/null
source "./config_${DGXSYSTEM}.sh"
walltime="${WALLTIME}"
if [[ "${PILOT:-0}" == 1 ]]; then
  walltime="${PILOT_WALLTIME:-$(printf '%02d:00:00' $(( (DGXRUNMINUTES * 3 + DGXINITMINUTES) / 60 + 1 )))}"
fi
read -r -a gpu_request <<< "${GPU_REQUEST---gpus-per-node=${DGXNGPU}}"
name="$(basename "${script}" .sbatch)"
args=(--parsable --job-name="${name}" --nodes="${DGXNNODES}" --time="${walltime}" "${gpu_request[@]}" "$@")
echo "submit: sbatch ${args[*]} ${script} (system ${DGXSYSTEM}, site ${SITE_CONFIG})" >&2
# The script goes through stdin without its own GPU directive, so the site's request syntax is the only one.
sed '/^#SBATCH --gpus-per-node/d' "${script}" | sbatch "${args[@]}"
