#!/bin/bash
# Build the Singularity/Apptainer image:  singularity/build.sh [--dry-run] [OUT.sif]  (default singularity/maskrcnn.sif)
#   --dry-run           stage and render only: print the exact build command and the staged file list, build nothing
#   -h, --help          this text
#   STAGE_DIR=DIR       stage into DIR and keep it (default: a temporary directory, removed afterwards)
#   NGC_TAG=25.05-py3   NGC PyTorch tag (the MLPerf v0.7 seed used 20.06-py3)
#   SINGULARITY=...     singularity or apptainer binary (default: whichever is installed)
#   BUILD_ARGS="--fakeroot"   extra flags for `build` (no root: --fakeroot or --remote)
# Stages a clean copy of the checkout (git-tracked + untracked-not-ignored files, so no .venv/results/datasets,
# and never an image: *.sif files are left out even when not ignored) and renders the definition (tag filled in,
# %arguments dropped) so that Singularity 3.x builds it too. Build space: set SINGULARITY_TMPDIR/APPTAINER_TMPDIR
# and SINGULARITY_CACHEDIR/APPTAINER_CACHEDIR to a large scratch folder (the NGC layers are ~10 GB).
# The image is built beside OUT and renamed over it once complete: an existing image stays usable until then, and
# a rebuild needs no --force (without a terminal the runtime refuses an existing target).
set -euo pipefail
# bash before 4.4 (RHEL/CentOS 7's 4.2) calls an empty array unbound under set -u: there, without it
((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] >= 404)) || set +u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "${here}")"
dry_run=0
out_arg=""
for arg in "$@"; do
  case "${arg}" in
    --dry-run) dry_run=1 ;;
    -h | --help)
      sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
      exit 0 ;;
    -*) echo "build.sh: unknown option ${arg}: the runtime's build options go in BUILD_ARGS (e.g." \
             "BUILD_ARGS=--fakeroot); see build.sh --help" >&2
        exit 1 ;;
    *) if [[ -n "${out_arg}" ]]; then
         echo "build.sh: one image path, got '${out_arg}' and '${arg}'" >&2
         exit 1
       fi
       out_arg="${arg}" ;;
  esac
done
out="$(realpath -m -- "${out_arg:-${here}/maskrcnn.sif}")"
NGC_TAG="${NGC_TAG:-25.05-py3}"
SINGULARITY="${SINGULARITY:-$(command -v singularity || command -v apptainer || true)}"
if [[ -z "${SINGULARITY}" ]]; then
  if [[ "${dry_run}" != 1 ]]; then
    echo "build.sh: neither singularity nor apptainer is installed" >&2
    exit 1
  fi
  SINGULARITY=singularity
fi
if [[ -n "${STAGE_DIR:-}" ]]; then
  ctx="$(realpath -m "${STAGE_DIR}")"
  rm -rf "${ctx}/object_detection" "${ctx}/maskrcnn.def"
  mkdir -p "${ctx}"
else
  ctx="$(mktemp -d)"
fi
partial="${out}.partial-$$"
trap 'rm -rf "${partial}"; if [[ -z "${STAGE_DIR:-}" ]]; then rm -rf "${ctx}"; fi' EXIT
mkdir -p "${ctx}/object_detection"
if git -C "${repo}" rev-parse --git-dir > /dev/null 2>&1; then
  git -C "${repo}" ls-files -z --cached --others --exclude-standard | grep -zEv '\.(sif|sqsh)$|\.sif\.partial-[0-9]+$' \
    | tar -C "${repo}" --null --ignore-failed-read -T - -cf - | tar -xf - -C "${ctx}/object_detection"
else
  tar -C "${repo}" --exclude=.venv --exclude=.git --exclude=results --exclude=datasets --exclude='*.sif' \
    --exclude='*.sqsh' --exclude='*.sif.partial-*' -cf - . \
    | tar -xf - -C "${ctx}/object_detection"
fi
sed -e "s/{{ *NGC_TAG *}}/${NGC_TAG}/g" -e '/^%arguments/,/^%/{/^%arguments/d;/^%/!d}' \
  "${here}/maskrcnn.def" > "${ctx}/maskrcnn.def"
read -r -a extra <<< "${BUILD_ARGS:-}"
cmd=("${SINGULARITY}" build "${extra[@]}" "${out}" maskrcnn.def)
if [[ "${dry_run}" == 1 ]]; then
  echo "build.sh: dry run; the build command, run in the staging directory (kept with STAGE_DIR=DIR):"
  echo "  cd ${ctx} && ${cmd[*]}"
  echo "build.sh: base image nvcr.io/nvidia/pytorch:${NGC_TAG}; staged files under object_detection/ ($(find "${ctx}/object_detection" -type f | wc -l)):"
  (cd "${ctx}" && find object_detection -type f | LC_ALL=C sort | sed 's/^/  /')
  exit 0
fi
cmd=("${SINGULARITY}" build "${extra[@]}" "${partial}" maskrcnn.def)
echo "build.sh: ${cmd[*]} (nvcr.io/nvidia/pytorch:${NGC_TAG}; renamed to ${out} once complete)"
cd "${ctx}"
"${cmd[@]}"
if [[ -d "${out}" && ! -L "${out}" ]]; then  # a sandbox image (--sandbox): the old one goes once the new is in place
  mv -T "${out}" "${partial}.old"
  mv -T "${partial}" "${out}"
  rm -rf "${partial}.old"
else
  mv -T -f "${partial}" "${out}"
fi
echo "build.sh: built ${out}"
