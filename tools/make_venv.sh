#!/usr/bin/env bash
# The venv of `make venv` (and of make test, make demo): tools/make_venv.sh PYTHON VENV
#   made with PYTHON when it is missing, has no working pip (Debian's python3 without python3-venv makes bin/python,
#   then fails for want of ensurepip) or holds a Python outside torch's range; then the pinned requirements, the
#   package (editable) and the stamp VENV/.installed. Under a lock (VENV.lock, where flock exists): a second make
#   started meanwhile (make demo beside make test) waits, then finds the venv made instead of removing it half-way.
#   As root with apt-get (a fresh Debian/Ubuntu CI image), a python without venv support gets python3.X-venv.
set -euo pipefail
# bash before 4.4 (RHEL/CentOS 7's 4.2) calls an empty array unbound under set -u: there, without it
((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] >= 404)) || set +u
PYTHON="$1" VENV="$2"
PY="${VENV}/bin/python"
STAMP="${VENV}/.installed"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# The Pythons torch 2.12.1 and torchvision 0.27.1 have wheels for (torchvision excludes 3.14.1).
in_range='import sys; v = sys.version_info; sys.exit(not ((3, 10) <= v[:2] <= (3, 14) and v[:3] != (3, 14, 1)))'
version() { "$1" -c 'import platform; print(platform.python_version())' 2> /dev/null || true; }

mkdir -p "$(dirname "${VENV}")"
if command -v flock > /dev/null; then
  exec 9> "${VENV}.lock"
  flock 9
fi
if [[ -f "${STAMP}" && "${STAMP}" -nt requirements.txt && "${STAMP}" -nt pyproject.toml ]]; then
  exit 0  # made while this one waited for the lock
fi

if [[ -e "${PY}" ]] && ! "${PY}" -c "${in_range}" > /dev/null 2>&1; then
  echo "make: the venv's Python (${PY}) is Python $(version "${PY}"), outside 3.10-3.14: making the venv again with ${PYTHON}"
  rm -rf "${VENV}"
fi
if ! "${PY}" -m pip --version > /dev/null 2>&1; then  # none, or a broken one: made (again) with PYTHON
  command -v "${PYTHON}" > /dev/null || {
    echo "make: ${PYTHON} is not installed: install Python 3.10-3.14, or name one (PYTHON=python3.11 make ...)" >&2
    exit 1
  }
  "${PYTHON}" -c "${in_range}" || {
    echo "make: ${PYTHON} is Python $(version "${PYTHON}"): torch 2.12.1 and torchvision 0.27.1 need Python 3.10 or newer, up to 3.14 (torchvision excludes 3.14.1) (PYTHON=python3.11 make ...)" >&2
    exit 1
  }
  rm -rf "${VENV}"
  if ! "${PYTHON}" -m venv "${VENV}"; then
    rm -rf "${VENV}"
    made=0 why="on Debian/Ubuntu install python3-venv (apt-get install python3-venv)"
    if [[ "$(id -u)" == 0 ]] && command -v apt-get > /dev/null; then
      minor="$("${PYTHON}" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
      echo "make: '${PYTHON} -m venv' failed: installing python${minor}-venv (apt-get)"
      apt=(apt-get -o DPkg::Lock::Timeout=300)
      log="$(mktemp "${TMPDIR:-/tmp}/make_venv.XXXXXX.log")"
      # a fresh image's package lists are empty: updated first
      if { "${apt[@]}" update -q && { DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -q "python${minor}-venv" ||
           DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -q python3-venv; }; } > "${log}" 2>&1; then
        rm -f "${log}"
        if "${PYTHON}" -m venv "${VENV}"; then made=1; else rm -rf "${VENV}"; fi
      else
        last="$(grep -E '^(E|W): ' "${log}" | tail -n 1 || true)"
        why="apt-get could not install python${minor}-venv (${last:-$(tail -n 1 "${log}")}; its output in ${log}): install it"
      fi
    fi
    if [[ "${made}" != 1 ]]; then
      echo "make: '${PYTHON} -m venv' failed: ${why}, then run make again" >&2
      exit 1
    fi
  fi
fi
# --no-compile: Python compiles a module's bytecode when it is first imported, not every file of torch and its CUDA
# libraries at install time (2026-11-28, 2 cores, pip's cache warm: the install 68 -> 36 s; the first import of
# torch, torchvision and the package then about 4 s more, once).
echo "make: installing requirements.txt and the package into ${VENV} (pip)"
"${PY}" -m pip install -q --upgrade pip
"${PY}" -m pip install -q --no-compile -r requirements.txt
"${PY}" -m pip install -q --no-compile --no-deps -e .
touch "${STAMP}"
