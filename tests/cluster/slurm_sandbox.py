#!/usr/bin/env python3
"""A real 4-node Slurm cluster on one machine, for tests (recipe: docs of the project's Slurm sandbox).

slurmctld runs in network namespace ``mrc-ctl`` (hostname ``slctl``, 192.168.213.1) and ``slurmd -N nodeI`` in
``mrc-nI`` (hostname ``nodeI``, 192.168.213.1I), joined by a bridge inside ``mrc-ctl``; no namespace has a route
out.  Daemons are started with ``nsenter --net`` (not ``ip netns exec``, which remounts /sys and hides the cgroup
mounts) plus ``unshare --uts`` for the hostname.  Each node advertises ``CPUs=2`` and ``Gres=gpu:N`` (count-only
GPUs, so ``--gpus-per-node`` works as on a GPU cluster).  Needs root with CAP_SYS_ADMIN/CAP_NET_ADMIN and the
Debian packages slurm-wlm, munge (tests/cluster/install_deps.sh).

    python tests/cluster/slurm_sandbox.py up      # start everything (idempotent: tears down leftovers first)
    python tests/cluster/slurm_sandbox.py status
    python tests/cluster/slurm_sandbox.py run -- sinfo -N    # any client command in the controller namespace
    python tests/cluster/slurm_sandbox.py down    # stop daemons (by pid file), delete namespaces, restore files

State, daemon logs and ``harness.log`` live in ``$SLURM_SANDBOX_DIR`` (default /tmp/maskrcnn-slurm-sandbox).
"""

from __future__ import annotations

import argparse
import grp
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

HOSTS_TAG = "# maskrcnn-slurm-sandbox"
SLURM_CONF = "/etc/slurm/slurm.conf"
GRES_CONF = "/etc/slurm/gres.conf"


class SandboxError(RuntimeError):
    pass


class SlurmSandbox:
    def __init__(self, workdir: Optional[str] = None, nodes: int = 4, cpus: int = 2, gpus: int = 2,
                 subnet: str = "192.168.213", prefix: str = "mrc"):
        self.workdir = os.path.abspath(workdir or os.environ.get("SLURM_SANDBOX_DIR", "/tmp/maskrcnn-slurm-sandbox"))
        self.nodes = nodes
        self.cpus = cpus
        self.gpus = gpus
        self.subnet = subnet
        self.ctl_ns = f"{prefix}-ctl"
        self.node_ns = [f"{prefix}-n{i}" for i in range(1, nodes + 1)]
        self.node_names = [f"node{i}" for i in range(1, nodes + 1)]
        self.log_path = os.path.join(self.workdir, "harness.log")
        self.started_munge = os.path.join(self.workdir, "started_munge")

    # ------------------------------------------------------------------ helpers
    def log(self, msg: str) -> None:
        os.makedirs(self.workdir, exist_ok=True)
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        with open(self.log_path, "a") as f:
            f.write(line + "\n")

    def sh(self, cmd: Sequence[str], check: bool = True, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
        r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, **kw)
        self.log(f"$ {' '.join(cmd)} -> {r.returncode}" + (f"\n{r.stdout.rstrip()}" if r.stdout.strip() else "")
                 + (f"\n{r.stderr.rstrip()}" if r.stderr.strip() else ""))
        if check and r.returncode != 0:
            raise SandboxError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip() or r.stdout.strip()}")
        return r

    def in_ctl(self, cmd: Sequence[str]) -> List[str]:
        """A command line that runs ``cmd`` in the controller's network namespace (where clients reach slurmctld)."""
        return ["nsenter", f"--net=/run/netns/{self.ctl_ns}", *cmd]

    def run(self, cmd: Sequence[str], check: bool = True, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
        return self.sh(self.in_ctl(cmd), check=check, timeout=timeout, **kw)

    def path(self, *parts: str) -> str:
        return os.path.join(self.workdir, *parts)

    # ------------------------------------------------------------------ checks
    def preflight(self) -> None:
        if os.geteuid() != 0:
            raise SandboxError("the Slurm sandbox needs root")
        missing = [t for t in ("slurmctld", "slurmd", "munged", "sbatch", "ip", "nsenter", "unshare")
                   if shutil.which(t) is None and not os.path.exists(f"/usr/sbin/{t}")]
        if missing:
            raise SandboxError(f"missing tools: {', '.join(missing)} (run tests/cluster/install_deps.sh)")
        for user in ("slurm", "munge"):
            try:
                pwd.getpwnam(user)
            except KeyError:
                raise SandboxError(f"user {user!r} missing (packages not installed?)") from None

    # ------------------------------------------------------------------ config
    def slurm_conf(self) -> str:
        w = self.workdir
        lines = [
            f"# written by tests/cluster/slurm_sandbox.py {HOSTS_TAG}",
            "ClusterName=mrcsandbox",
            f"SlurmctldHost=slctl({self.subnet}.1)",
            "SlurmUser=slurm", "SlurmctldPort=6817", "SlurmdPort=6818",
            "AuthType=auth/munge", "CredType=cred/munge", "MpiDefault=none", "MailProg=/bin/true",
            "ReturnToService=2",
            f"StateSaveLocation={w}/ctld", f"SlurmctldPidFile={w}/run/slurmctld.pid",
            f"SlurmctldLogFile={w}/log/slurmctld.log",
            f"SlurmdSpoolDir={w}/spool/%n", f"SlurmdPidFile={w}/run/slurmd-%n.pid",
            f"SlurmdLogFile={w}/log/slurmd-%n.log",
            "SlurmctldDebug=info", "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/affinity", "SwitchType=switch/none",
            "SchedulerType=sched/backfill", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "GresTypes=gpu",
            "InactiveLimit=0", "KillWait=5", "MinJobAge=300", "SlurmctldTimeout=30", "SlurmdTimeout=60",
            "Waittime=0", "MessageTimeout=10",
            "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={w}/log/jobcomp.txt", "JobAcctGatherType=jobacct_gather/none",
        ]
        for i, name in enumerate(self.node_names, 1):
            lines.append(f"NodeName={name} NodeAddr={self.subnet}.1{i} CPUs={self.cpus} Boards=1 SocketsPerBoard=1 "
                         f"CoresPerSocket={self.cpus} ThreadsPerCore=1 RealMemory=4000 Gres=gpu:{self.gpus} "
                         "State=UNKNOWN")
        lines.append(f"PartitionName=debug Nodes={','.join(self.node_names)} Default=YES MaxTime=INFINITE State=UP")
        return "\n".join(lines) + "\n"

    def gres_conf(self) -> str:
        # gres/gpu wants device files: character devices (1,3) like /dev/null stand in for /dev/nvidiaN
        files = self.path("dev", f"fakegpu[0-{self.gpus - 1}]") if self.gpus > 1 else self.path("dev", "fakegpu0")
        return f"# {HOSTS_TAG}\nAutoDetect=off\nName=gpu File={files}\n"

    def _install_conf(self, path: str, text: str) -> None:
        backup = self.path("backup", os.path.basename(path))
        if os.path.exists(path) and not os.path.exists(backup):
            with open(path) as f:
                if HOSTS_TAG not in f.readline():
                    os.makedirs(os.path.dirname(backup), exist_ok=True)
                    shutil.copy2(path, backup)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o644)

    def _restore_conf(self, path: str) -> None:
        backup = self.path("backup", os.path.basename(path))
        if os.path.exists(backup):
            shutil.move(backup, path)
        elif os.path.exists(path):
            with open(path) as f:
                ours = HOSTS_TAG in f.readline()
            if ours:
                os.remove(path)

    # ------------------------------------------------------------------ up
    def up(self, timeout: float = 60) -> None:
        t0 = time.monotonic()
        self.preflight()
        self.down(quiet=True)
        if os.path.isdir(self.workdir):
            shutil.rmtree(self.workdir)
        slurm_uid, slurm_gid = pwd.getpwnam("slurm").pw_uid, grp.getgrnam("slurm").gr_gid
        for d in ("ctld", "run", "log", "spool", "jobs", "dev"):
            os.makedirs(self.path(d), exist_ok=True)
        for d in ("ctld", "run", "log"):
            os.chown(self.path(d), slurm_uid, slurm_gid)
        os.chmod(self.path("run"), 0o777)  # slurmd (root) and slurmctld (slurm) pid files
        os.chmod(self.path("log"), 0o777)
        for name in self.node_names:
            os.makedirs(self.path("spool", name), exist_ok=True)
        for g in range(self.gpus):
            os.mknod(self.path("dev", f"fakegpu{g}"), 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        self.log(f"== up: {self.nodes} nodes, workdir {self.workdir}")
        self._install_conf(SLURM_CONF, self.slurm_conf())
        self._install_conf(GRES_CONF, self.gres_conf())
        self._netns_up()
        self._munge_up()
        self.sh(self.in_ctl(["unshare", "--uts", "sh", "-c", "hostname slctl; exec /usr/sbin/slurmctld"]))
        for ns, name in zip(self.node_ns, self.node_names):
            self.sh(["nsenter", f"--net=/run/netns/{ns}", "unshare", "--uts", "sh", "-c",
                     f"hostname {name}; exec /usr/sbin/slurmd -N {name}"])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = self.run(["sinfo", "-h", "-N", "-t", "idle", "-o", "%N"], check=False)
            if r.returncode == 0 and len(set(r.stdout.split())) >= self.nodes:
                self.log(self.status())
                self.log(f"== cluster up in {time.monotonic() - t0:.1f}s")
                return
            time.sleep(0.5)
        tail = self.tail_logs()
        raise SandboxError(f"nodes not idle after {timeout}s; sinfo: {self.status()}\n{tail}")

    def _netns_up(self) -> None:
        ctl = self.ctl_ns
        self.sh(["ip", "netns", "add", ctl])
        self.sh(["ip", "-n", ctl, "link", "set", "lo", "up"])
        self.sh(["ip", "-n", ctl, "link", "add", "mrcbr0", "type", "bridge"])
        self.sh(["ip", "-n", ctl, "addr", "add", f"{self.subnet}.1/24", "dev", "mrcbr0"])
        self.sh(["ip", "-n", ctl, "link", "set", "mrcbr0", "up"])
        for i, ns in enumerate(self.node_ns, 1):
            self.sh(["ip", "netns", "add", ns])
            self.sh(["ip", "-n", ns, "link", "set", "lo", "up"])
            self.sh(["ip", "-n", ctl, "link", "add", f"mrcv{i}", "type", "veth", "peer", "name", "eth0", "netns", ns])
            self.sh(["ip", "-n", ctl, "link", "set", f"mrcv{i}", "master", "mrcbr0"])
            self.sh(["ip", "-n", ctl, "link", "set", f"mrcv{i}", "up"])
            self.sh(["ip", "-n", ns, "addr", "add", f"{self.subnet}.1{i}/24", "dev", "eth0"])
            self.sh(["ip", "-n", ns, "link", "set", "eth0", "up"])
        self._hosts_remove()
        with open("/etc/hosts", "a") as f:
            f.write(f"{self.subnet}.1 slctl {HOSTS_TAG}\n")
            for i, name in enumerate(self.node_names, 1):
                f.write(f"{self.subnet}.1{i} {name} {HOSTS_TAG}\n")

    def _munge_up(self) -> None:
        def ok() -> bool:
            r = subprocess.run("munge -n | unmunge", shell=True, capture_output=True, text=True)
            return r.returncode == 0 and "Success" in r.stdout

        if os.path.exists("/run/munge/munge.socket.2") and ok():
            self.log("munged already running; reusing it")
            return
        if not os.path.exists("/etc/munge/munge.key") or os.path.getsize("/etc/munge/munge.key") == 0:
            self.sh(["mungekey", "--create", "--keyfile=/etc/munge/munge.key"])
            self.sh(["chown", "munge:munge", "/etc/munge/munge.key"])
            os.chmod("/etc/munge/munge.key", 0o600)
        for d in ("/run/munge", "/var/log/munge", "/var/lib/munge"):
            self.sh(["install", "-d", "-o", "munge", "-g", "munge", "-m", "0755", d])
        self.sh(["runuser", "-u", "munge", "--", "/usr/sbin/munged"])
        for _ in range(50):
            if ok():
                with open(self.started_munge, "w") as f:
                    f.write("1")
                return
            time.sleep(0.1)
        raise SandboxError("munged did not start")

    # ------------------------------------------------------------------ down
    @staticmethod
    def _alive(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("State:"):
                        return "Z" not in line.split()[1]
        except OSError:
            return False
        return False

    def _stop_pidfiles(self, files: List[str]) -> None:
        pids = []
        for f in files:
            try:
                with open(f) as fh:
                    pid = int(fh.read().strip())
            except (OSError, ValueError):
                continue
            if self._alive(pid):
                try:
                    os.kill(pid, signal.SIGTERM)
                    pids.append(pid)
                except OSError:
                    pass
            try:
                os.remove(f)
            except OSError:
                pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(self._alive(p) for p in pids):
            time.sleep(0.1)
        for p in pids:
            if self._alive(p):
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass

    def _hosts_remove(self) -> None:
        try:
            with open("/etc/hosts") as f:
                lines = f.readlines()
        except OSError:
            return
        kept = [ln for ln in lines if HOSTS_TAG not in ln]
        if kept != lines:
            with open("/etc/hosts", "w") as f:
                f.writelines(kept)

    def down(self, quiet: bool = False) -> None:
        if not quiet or os.path.isdir(self.workdir):
            self.log("== down")
        if os.path.exists(f"/run/netns/{self.ctl_ns}") and shutil.which("scancel"):
            try:  # end leftover jobs (ours: this cluster only runs the tests' jobs)
                self.run(["scancel", "--full", "--state=RUNNING"], check=False, timeout=20)
                self.run(["scancel", "--state=PENDING"], check=False, timeout=20)
            except subprocess.TimeoutExpired:
                pass
        files = [self.path("run", f"slurmd-{n}.pid") for n in self.node_names]
        self._stop_pidfiles(files + [self.path("run", "slurmctld.pid")])
        if os.path.exists(self.started_munge):
            self._stop_pidfiles(["/run/munge/munged.pid"])
            os.remove(self.started_munge)
        for ns in self.node_ns + [self.ctl_ns]:
            if os.path.exists(f"/run/netns/{ns}"):
                self.sh(["ip", "netns", "del", ns], check=False)
        self._hosts_remove()
        self._restore_conf(SLURM_CONF)
        self._restore_conf(GRES_CONF)

    # ------------------------------------------------------------------ info
    def status(self) -> str:
        if not os.path.exists(f"/run/netns/{self.ctl_ns}"):
            return "down (no namespaces)"
        r = self.run(["sinfo", "-N", "-o", "%N %T %G"], check=False)
        return (r.stdout + r.stderr).strip()

    def tail_logs(self, n: int = 20) -> str:
        out = []
        logdir = self.path("log")
        if os.path.isdir(logdir):
            for name in sorted(os.listdir(logdir)):
                with open(os.path.join(logdir, name), errors="replace") as f:
                    lines = f.readlines()[-n:]
                out.append(f"--- {name}\n" + "".join(lines))
        return "\n".join(out)

    def sbatch(self, args: Sequence[str], env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None,
               wait: bool = True, timeout: float = 600) -> subprocess.Popen:
        """Start ``sbatch [--wait] ARGS`` in the controller namespace; returns the Popen."""
        cmd = self.in_ctl(["sbatch", *(["--wait"] if wait else []), *args])
        self.log(f"$ {' '.join(cmd)} (cwd={cwd})")
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("up", "down", "status", "run"))
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--gpus", type=int, default=2, help="count-only GPUs per node (Gres=gpu:N)")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    sb = SlurmSandbox(nodes=a.nodes, gpus=a.gpus)
    try:
        if a.action == "up":
            sb.up()
            print(sb.status())
        elif a.action == "down":
            sb.down()
            print("down")
        elif a.action == "status":
            print(sb.status())
        else:
            cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
            return subprocess.call(sb.in_ctl(cmd))
    except SandboxError as e:
        print(f"slurm_sandbox: {e}\n(see {sb.log_path})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
