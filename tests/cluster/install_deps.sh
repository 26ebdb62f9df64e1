#!/bin/bash
# Install the system packages the launch/cluster tests need, only if missing (idempotent).
# Debian/Ubuntu + root only; elsewhere it prints what is missing and exits 0 (the tests then fail/skip with a reason),
# except under CI=true: there a run without root, or without a package it cannot install, exits 1, since the
# cluster, container and failure tests would skip and the run would pass having tested less.
set -euo pipefail

if [ "${CI:-}" = true ] && [ "$(id -u)" -ne 0 ]; then
  echo "install_deps: CI=true but not root: the Slurm cluster, container and failure tests need root and would skip" >&2
  exit 1
fi

want=(slurm-wlm slurmctld slurmd slurm-client munge numactl shellcheck iproute2 util-linux bubblewrap g++)
# inductor's C++ kernels include Python.h: the headers of the interpreter that runs the tests (TEST_PYTHON, from make
# test), Debian's libpython3.X-dev for its own python3.X (pyenv, conda and uv Pythons carry theirs)
if [ -n "${TEST_PYTHON:-}" ] && headers="$("${TEST_PYTHON}" -c 'import sys, sysconfig; print(sysconfig.get_paths()["include"], "%d.%d" % sys.version_info[:2])' 2> /dev/null)"; then
  read -r include version <<< "${headers}"
  if [ ! -f "${include}/Python.h" ]; then want+=("libpython${version}-dev"); fi
fi
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "install_deps: all present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "install_deps: missing ${missing[*]} (need root + apt-get to install); skipping" >&2
  [ "${CI:-}" = true ] && { echo "install_deps: CI=true: the tests that need them would skip" >&2; exit 1; }
  exit 0
fi

# keep apt from starting the daemons with the distribution's default config; the file names its writer, so that
# one a killed run left is removed by the next (a site's own is kept)
policy="${POLICY_RC_D:-/usr/sbin/policy-rc.d}"
policy_file() {
  printf '#!/bin/sh\n# written by tests/cluster/install_deps.sh for its apt-get run\nexit 101\n'
}
created_policy=0
if [ ! -e "${policy}" ] || [ "$(cat "${policy}")" = "$(policy_file)" ]; then
  policy_file > "${policy}"
  chmod 755 "${policy}"
  created_policy=1
fi
trap 'if [ "$created_policy" = 1 ]; then rm -f "${policy}"; fi' EXIT

echo "install_deps: installing ${missing[*]} with apt-get (Slurm and munge for the 4-node sandbox cluster, numactl for bind_launch, shellcheck for the scripts, g++ and Python's headers for inductor's C++ kernels in the compiled tests)"
# apt's output goes to a log; a failure (no network, a broken repository, dpkg's lock held past 5 minutes by
# unattended-upgrades) is one line naming its last error and the log
log="$(mktemp "${TMPDIR:-/tmp}/install_deps.XXXXXX.log")"
wait_lock=(-o DPkg::Lock::Timeout=300)
# a run killed inside dpkg left packages half-configured: apt-get refuses until this is done. dpkg has no lock
# timeout of its own: retried while another apt or dpkg holds the lock, for as long as apt-get waits
configure_dpkg() {
  local tries
  for ((tries = 0; tries < 300 / ${DPKG_LOCK_RETRY_S:-5}; tries++)); do
    DEBIAN_FRONTEND=noninteractive dpkg --configure -a > "${log}.dpkg" 2>&1 && { cat "${log}.dpkg"; return 0; }
    cat "${log}.dpkg"
    grep -qE 'frontend lock|Could not get lock|locked by another process' "${log}.dpkg" || return 1
    sleep "${DPKG_LOCK_RETRY_S:-5}"
  done
  return 1
}
trap 'rm -f "${log}.dpkg"; if [ "$created_policy" = 1 ]; then rm -f "${policy}"; fi' EXIT
if ! { configure_dpkg && apt-get "${wait_lock[@]}" update -q &&
       DEBIAN_FRONTEND=noninteractive apt-get "${wait_lock[@]}" install -y -q --no-install-recommends "${missing[@]}"
     } >> "${log}" 2>&1; then
  last="$(grep -E '^(E|W|dpkg): ' "${log}" | tail -n 1 || true)"
  echo "install_deps: apt-get could not install ${missing[*]} (${last:-$(tail -n 1 "${log}")}; its output in ${log})" >&2
  [ "${CI:-}" = true ] && exit 1
  exit 0  # as without root: the tests that need them skip, naming what is missing
fi
rm -f "${log}"
