#!/bin/bash
# Build the Singularity/Apptainer image:  singularity/build.sh [OUT.sif]      (default singularity/maskrcnn.sif)
#   NGC_TAG=25.05-py3   NGC PyTorch tag (the MLPerf v0.7 seed used 20.06-py3)
#   SINGULARITY=...     singularity or apptainer binary (default: whichever is installed)
#   BUILD_ARGS="--fakeroot"   extra flags for `build` (no root: --fakeroot or --remote)
# Stages a clean copy of the checkout (git-tracked + untracked-not-ignored files, so no .venv/results/datasets)
# and renders the definition (tag filled in, %arguments dropped) so that Singularity 3.x builds it too.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "${here}")"
out="$(realpath -m "${1:-${here}/maskrcnn.sif}")"
NGC_TAG="${NGC_TAG:-25.05-py3}"
SINGULARITY="${SINGULARITY:-$(command -v singularity || command -v apptainer || true)}"
if [[ -z "${SINGULARITY}" ]]; then
  echo "build.sh: neither singularity nor apptainer is installed" >&2
  exit 1
fi
ctx="$(mktemp -d)"
trap 'rm -rf "${ctx}"' EXIT
mkdir -p "${ctx}/object_detection"
if git -C "${repo}" rev-parse --git-dir > /dev/null 2>&1; then
  git -C "${repo}" ls-files -z --cached --others --exclude-standard \
    | tar -C "${repo}" --null --ignore-failed-read -T - -cf - | tar -xf - -C "${ctx}/object_detection"
else
  tar -C "${repo}" --exclude=.venv --exclude=.git --exclude=results --exclude=datasets --exclude='*.sif' -cf - . \
    | tar -xf - -C "${ctx}/object_detection"
fi
sed -e "s/{{ *NGC_TAG *}}/${NGC_TAG}/g" -e '/^%arguments/,/^%/{/^%arguments/d;/^%/!d}' \
  "${here}/maskrcnn.def" > "${ctx}/maskrcnn.def"
read -r -a extra <<< "${BUILD_ARGS:-}"
echo "build.sh: ${SINGULARITY} build ${extra[*]} ${out} (nvcr.io/nvidia/pytorch:${NGC_TAG})"
cd "${ctx}"
"${SINGULARITY}" build "${extra[@]}" "${out}" maskrcnn.def
