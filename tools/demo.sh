#!/usr/bin/env bash
# The embedded default: synthetic COCO-format data -> MLPerf-style CPU training to the target -> checker.
#   tools/demo.sh [KEY VALUE ...]      (run by `make demo`; PYTHON, DEMO_DIR, DATADIR, SEED may be overridden)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON="${PYTHON:-.venv/bin/python}"
if [[ "${PYTHON}" == */* ]]; then PYTHON="$(cd "$(dirname "${PYTHON}")" && pwd)/$(basename "${PYTHON}")"; fi
DEMO_DIR="${DEMO_DIR:-results/demo}"
DATADIR="${DATADIR:-datasets/synthetic}"
mkdir -p "${DEMO_DIR}"
rm -f "${DEMO_DIR}/mlperf_log.txt"

"${PYTHON}" tools/make_synthetic_coco.py --out "${DATADIR}" --train 600 --val 100 --seed 0

ret=0
DGXSYSTEM=CPU DATADIR="${DATADIR}" LOGDIR="${DEMO_DIR}" PYTHON="${PYTHON}" EXTRA_PARAMS="--seed ${SEED:-1}" \
  ./run_and_time.sh OUTPUT_DIR "${DEMO_DIR}" "$@" 2>&1 | tee "${DEMO_DIR}/result_0.txt" || ret=$?
if [[ "${ret}" -ne 0 ]]; then
  echo "demo: training did not reach the target (exit ${ret}); log in ${DEMO_DIR}/result_0.txt" >&2
  exit "${ret}"
fi

echo "== MLPerf compliance checker (ruleset 0.7.0) on ${DEMO_DIR}/mlperf_log.txt"
cd "${DEMO_DIR}"
"${PYTHON}" -m mlperf_logging.compliance_checker --usage training --ruleset 0.7.0 mlperf_log.txt 2>&1 | tail -n 3
