#!/usr/bin/env bash
# The embedded default: synthetic COCO-format data -> MLPerf-style CPU training to the target -> checker.
#   tools/demo.sh [KEY VALUE ...]      (run by `make demo`; PYTHON, DEMO_DIR, DEMO_DATADIR, SEED may be overridden)
# The synthetic data's folder is DEMO_DATADIR, not DATADIR: a DATADIR exported for real COCO (the cluster's steps,
# the image's /data) is not the demo's to write into.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON="${PYTHON:-.venv/bin/python}"
if [[ "${PYTHON}" == */* ]]; then PYTHON="$(cd "$(dirname "${PYTHON}")" && pwd)/$(basename "${PYTHON}")"; fi
DEMO_DIR="${DEMO_DIR:-results/demo}"
DEMO_DATADIR="${DEMO_DATADIR:-datasets/synthetic}"
mkdir -p "${DEMO_DIR}"  # an earlier run's logs there are moved aside by the trainer, once the folder is its own

"${PYTHON}" tools/make_synthetic_coco.py --out "${DEMO_DATADIR}" --train 600 --val 100 --seed 0

ret=0
DGXSYSTEM=CPU DATADIR="${DEMO_DATADIR}" LOGDIR="${DEMO_DIR}" PYTHON="${PYTHON}" EXTRA_PARAMS="--seed ${SEED:-1}" \
  ./run_and_time.sh OUTPUT_DIR "${DEMO_DIR}" "$@" 2>&1 | tee "${DEMO_DIR}/result_0.txt" || ret=$?
if [[ "${ret}" -eq 3 ]]; then
  echo "demo: training did not reach the target (exit 3: not converged); log in ${DEMO_DIR}/result_0.txt" >&2
  exit "${ret}"
elif [[ "${ret}" -ne 0 ]]; then
  echo "demo: training failed (exit ${ret}): the error line above says why; log in ${DEMO_DIR}/result_0.txt" >&2
  exit "${ret}"
fi

echo "== MLPerf compliance checker (ruleset 0.7.0) on ${DEMO_DIR}/mlperf_log.txt"
cd "${DEMO_DIR}"
"${PYTHON}" -m mlperf_logging.compliance_checker --usage training --ruleset 0.7.0 mlperf_log.txt 2>&1 | tail -n 3
