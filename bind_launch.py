#!/usr/bin/env python3
"""Start one training process per GPU, each pinned to its socket's cores and memory.

Command-line compatible with NVIDIA's MLPerf ``bind_launch.py``::

    python -m bind_launch --nsockets_per_node=2 --ncores_per_socket=20 --nproc_per_node=8 \
        tools/train_mlperf.py --config-file X.yaml KEY VALUE ...

Local rank ``i`` of ``P`` processes on ``S`` sockets goes to socket ``i // (P/S)``, gets its share of that
socket's physical cores (plus their hyperthread siblings, numbered ``+ S*cores`` as Linux does, unless
``--no_hyperthreads``) and that socket's memory node (unless ``--no_membind``).  Each child gets ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` and ``--local_rank=i``.

Beyond NVIDIA's version:

* socket/core counts default to the machine's real topology (sysfs, then ``lscpu``);
* ``--nnodes``/``--node_rank``/``--master_addr`` default to the Slurm environment when present;
* binding uses ``numactl`` when it is installed and allowed, otherwise (or when ``--membind`` is refused,
  e.g. inside a cgroup/cpuset) it falls back to ``os.sched_setaffinity`` with a warning: binding never kills
  the job;
* ``--dry-run`` prints the plan and exits;
* SIGINT/SIGTERM/SIGHUP/SIGUSR1/SIGUSR2 are forwarded to the children;
* when a child exits non-zero, the others are terminated and bind_launch exits with that code
  (``128 + signal`` for a child killed by a signal); the trainer's "not converged" code (3) is an outcome that all
  ranks reach together, so the others are given time to end the same way;
* a warning, once, when the ranks outnumber the cores it can pin.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

__all__ = [
    "Binding",
    "Topology",
    "cpu_list_str",
    "parse_cpu_list",
    "detect_topology",
    "plan_bindings",
    "slurm_defaults",
    "expand_hostlist",
    "main",
]

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
# The trainer's exit code for a run that reached SOLVER.MAX_ITER without the quality target: an outcome that every
# rank reaches together, not a crash (maskrcnn_benchmark/cli/exit_codes.py NOT_CONVERGED; a test keeps them equal).
NOT_CONVERGED = 3
NOT_CONVERGED_GRACE_S = 120.0  # how long the other ranks may take to reach the same end
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _warn(msg: str) -> None:
    print(f"bind_launch: WARNING: {msg}", file=sys.stderr, flush=True)


def _info(msg: str) -> None:
    print(f"bind_launch: {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------- cpu lists
def parse_cpu_list(text: str) -> List[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11] (sysfs/numactl syntax)."""
    cpus: List[int] = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            cpus.extend(range(int(lo), int(hi) + 1))
        else:
            cpus.append(int(part))
    return sorted(set(cpus))


def cpu_list_str(cpus: Iterable[int]) -> str:
    """[0, 1, 2, 3, 8, 10, 11] -> '0-3,8,10-11'."""
    out: List[str] = []
    items = sorted(set(cpus))
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        out.append(str(items[i]) if i == j else f"{items[i]}-{items[j]}")
        i = j + 1
    return ",".join(out)


# --------------------------------------------------------------------------------------------- topology
@dataclass
class Topology:
    nsockets: int
    ncores_per_socket: int
    threads_per_core: int = 1
    source: str = "default"


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _topology_from_sysfs(root: str) -> Optional[Topology]:
    cpu_dirs = glob.glob(os.path.join(root, "devices/system/cpu/cpu[0-9]*"))
    cores: Dict[int, set] = {}
    threads: Dict[Tuple[int, int], int] = {}
    for d in cpu_dirs:
        online = _read(os.path.join(d, "online"))
        if online == "0":
            continue
        pkg = _read(os.path.join(d, "topology/physical_package_id"))
        core = _read(os.path.join(d, "topology/core_id"))
        if pkg is None or core is None:
            continue
        pkg_i, core_i = int(pkg), int(core)
        cores.setdefault(pkg_i, set()).add(core_i)
        threads[(pkg_i, core_i)] = threads.get((pkg_i, core_i), 0) + 1
    if not cores:
        return None
    return Topology(
        nsockets=len(cores),
        ncores_per_socket=min(len(c) for c in cores.values()),
        threads_per_core=max(threads.values()),
        source="sysfs",
    )


def _topology_from_lscpu() -> Optional[Topology]:
    exe = shutil.which("lscpu")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "-p=CPU,CORE,SOCKET"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    cores: Dict[int, set] = {}
    threads: Dict[Tuple[int, int], int] = {}
    for line in out.splitlines():
        if not line or line.startswith("#"):
            continue
        try:
            _cpu, core, sock = (int(x) for x in line.split(",")[:3])
        except ValueError:
            continue
        cores.setdefault(sock, set()).add(core)
        threads[(sock, core)] = threads.get((sock, core), 0) + 1
    if not cores:
        return None
    return Topology(len(cores), min(len(c) for c in cores.values()), max(threads.values()), "lscpu")


def detect_topology(sysfs_root: str = "/sys") -> Topology:
    """Sockets, physical cores per socket and threads per core of this machine."""
    topo = _topology_from_sysfs(sysfs_root) or _topology_from_lscpu()
    if topo is None:
        topo = Topology(1, max(1, os.cpu_count() or 1), 1, "cpu_count")
    return topo


def numa_nodes(sysfs_root: str = "/sys") -> Optional[List[int]]:
    """The NUMA nodes that exist, or None when unknown (no sysfs)."""
    online = _read(os.path.join(sysfs_root, "devices/system/node/online"))
    if online is None:
        return None
    return parse_cpu_list(online)


# --------------------------------------------------------------------------------------------- plan
@dataclass
class Binding:
    local_rank: int
    socket: int
    cpus: List[int]
    mem_node: Optional[int]
    physical_cpus: List[int] = field(default_factory=list)

    def numactl_args(self, membind: bool = True) -> List[str]:
        args = [f"--physcpubind={cpu_list_str(self.cpus)}"]
        if membind and self.mem_node is not None:
            args.append(f"--membind={self.mem_node}")
        return args


def plan_bindings(
    nproc_per_node: int,
    nsockets: int,
    ncores_per_socket: int,
    hyperthreads: bool = True,
    membind: bool = True,
) -> List[Binding]:
    """NVIDIA's core/socket/memory plan, generalised to uneven shapes.

    With P processes and S sockets, ``P/S`` processes share a socket (rounded up) and each gets
    ``cores_per_socket // (P/S)`` consecutive physical cores; hyperthread siblings are the same numbers
    plus the machine's total physical core count.  Fewer processes than sockets: one socket each.
    More processes than cores: they share cores round-robin.
    """
    if nproc_per_node < 1 or nsockets < 1 or ncores_per_socket < 1:
        raise ValueError("nproc_per_node, nsockets and ncores_per_socket must be >= 1")
    total_cores = nsockets * ncores_per_socket
    per_socket = -(-nproc_per_node // nsockets)  # ceil
    cores_per_proc = ncores_per_socket // per_socket
    plan = []
    for i in range(nproc_per_node):
        sock = i // per_socket
        slot = i % per_socket
        base = sock * ncores_per_socket
        if cores_per_proc >= 1:
            phys = list(range(base + slot * cores_per_proc, base + (slot + 1) * cores_per_proc))
        else:
            phys = [base + slot % ncores_per_socket]
        cpus = list(phys)
        if hyperthreads:
            cpus += [c + total_cores for c in phys]
        plan.append(Binding(i, sock, cpus, sock if membind else None, phys))
    return plan


# --------------------------------------------------------------------------------------------- slurm
def expand_hostlist(hostlist: str) -> List[str]:
    """Expand a Slurm hostlist ('node[1-3,7],gpu01') without scontrol."""
    hosts: List[str] = []
    parts: List[str] = []
    depth, cur = 0, ""
    for ch in hostlist:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "["
        depth -= ch == "]"
        cur += ch
    if cur:
        parts.append(cur)
    for part in parts:
        if "[" not in part:
            hosts.append(part)
            continue
        prefix, rest = part.split("[", 1)
        ranges, suffix = rest.split("]", 1)
        for r in ranges.split(","):
            if "-" in r:
                lo, hi = r.split("-", 1)
                width = len(lo)
                hosts.extend(f"{prefix}{n:0{width}d}{suffix}" for n in range(int(lo), int(hi) + 1))
            else:
                hosts.append(f"{prefix}{r}{suffix}")
    return hosts


def _first_host(nodelist: str) -> Optional[str]:
    scontrol = shutil.which("scontrol")
    if scontrol:
        try:
            out = subprocess.run(
                [scontrol, "show", "hostnames", nodelist], capture_output=True, text=True, timeout=20
            )
            if out.returncode == 0 and out.stdout.split():
                return out.stdout.split()[0]
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        hosts = expand_hostlist(nodelist)
    except ValueError:
        return None
    return hosts[0] if hosts else None


def slurm_defaults(env: Optional[Dict[str, str]] = None) -> Dict[str, object]:
    """nnodes / node_rank / master_addr taken from a Slurm job step's environment (empty outside Slurm)."""
    env = os.environ if env is None else env
    out: Dict[str, object] = {}
    nnodes = env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES")
    if nnodes:
        out["nnodes"] = int(nnodes)
    if env.get("SLURM_NODEID"):
        out["node_rank"] = int(env["SLURM_NODEID"])
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if nodelist and int(out.get("nnodes", 1)) > 1:
        host = _first_host(nodelist)
        if host:
            out["master_addr"] = host
    return out


# --------------------------------------------------------------------------------------------- args
def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bind_launch",
        description="Launch one process per GPU, each bound to its socket's cores and memory (NVIDIA-compatible).",
    )
    p.add_argument("--nnodes", type=int, default=None, help="number of nodes (default: Slurm's, else 1)")
    p.add_argument("--node_rank", type=int, default=None, help="rank of this node (default: SLURM_NODEID, else 0)")
    p.add_argument("--nproc_per_node", type=int, default=1, help="processes (GPUs) per node")
    p.add_argument("--master_addr", default=None,
                   help="rank-0 host (default: $MASTER_ADDR, else first Slurm node when nnodes>1, else 127.0.0.1)")
    p.add_argument("--master_port", type=int, default=None, help="rendezvous port (default: $MASTER_PORT, else 29500)")
    p.add_argument("--nsockets_per_node", type=int, default=None, help="sockets per node (default: detected)")
    p.add_argument("--ncores_per_socket", type=int, default=None,
                   help="physical cores per socket (default: detected)")
    p.add_argument("--no_hyperthreads", action="store_true", help="do not add the hyperthread siblings")
    p.add_argument("--no_membind", action="store_true", help="do not bind memory to the socket's NUMA node")
    p.add_argument("--binding", choices=("auto", "numactl", "affinity", "none"), default="auto",
                   help="auto: numactl if usable, else sched_setaffinity (default); none: no binding")
    p.add_argument("--kill_timeout", type=float, default=10.0,
                   help="seconds between SIGTERM and SIGKILL when stopping the children")
    p.add_argument("--no_python", action="store_true", help="run the script directly, not through Python")
    p.add_argument("--dry-run", "--dry_run", dest="dry_run", action="store_true", help="print the plan and exit")
    p.add_argument("training_script", help="the script to launch (tools/train_mlperf.py)")
    p.add_argument("training_script_args", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)

    sl = slurm_defaults()
    if args.nnodes is None:
        args.nnodes = int(sl.get("nnodes", 1))
    if args.node_rank is None:
        args.node_rank = int(sl.get("node_rank", 0))
    if args.master_addr is None:
        args.master_addr = os.environ.get("MASTER_ADDR") or str(sl.get("master_addr", "127.0.0.1"))
    if args.master_port is None:
        args.master_port = int(os.environ.get("MASTER_PORT") or 29500)
    args.topology = None
    if args.nsockets_per_node is None or args.ncores_per_socket is None:
        topo = detect_topology()
        args.topology = topo
        if args.nsockets_per_node is None:
            args.nsockets_per_node = topo.nsockets
        if args.ncores_per_socket is None:
            args.ncores_per_socket = topo.ncores_per_socket
    if args.nproc_per_node < 1:
        p.error("--nproc_per_node must be >= 1")
    if args.nnodes < 1 or not 0 <= args.node_rank < args.nnodes:
        p.error(f"node_rank {args.node_rank} is not in [0, nnodes={args.nnodes})")
    return args


# --------------------------------------------------------------------------------------------- binding
def _numactl_works(numactl: str, opts: List[str]) -> Tuple[bool, str]:
    try:
        r = subprocess.run([numactl, *opts, "--", "true"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as e:
        return False, str(e)
    return r.returncode == 0, (r.stderr or r.stdout).strip()


def resolve_binding(b: Binding, mode: str, membind: bool) -> Tuple[str, List[str], Optional[List[int]]]:
    """Decide how to bind one rank here: ('numactl', prefix, None), ('affinity', [], cpus) or ('none', [], None)."""
    if mode == "none":
        return "none", [], None
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        allowed = set(b.cpus)
    cpus = [c for c in b.cpus if c in allowed]
    if not cpus:
        _warn(f"local rank {b.local_rank}: planned cpus {cpu_list_str(b.cpus)} are not in this process's "
              f"allowed set {cpu_list_str(allowed)}; not binding it")
        return "none", [], None
    if len(cpus) < len(b.cpus):
        _warn(f"local rank {b.local_rank}: only cpus {cpu_list_str(cpus)} of {cpu_list_str(b.cpus)} are "
              f"available here")
    eff = Binding(b.local_rank, b.socket, cpus, b.mem_node, b.physical_cpus)
    if membind and b.mem_node is not None:
        nodes = numa_nodes()
        if nodes is not None and b.mem_node not in nodes:
            _warn(f"local rank {b.local_rank}: NUMA node {b.mem_node} does not exist here (nodes "
                  f"{cpu_list_str(nodes)}); not binding memory")
            membind = False
    if mode in ("auto", "numactl"):
        numactl = shutil.which("numactl")
        if numactl is None:
            _warn("numactl not found; binding with os.sched_setaffinity (no memory binding)")
        else:
            opts = eff.numactl_args(membind)
            ok, err = _numactl_works(numactl, opts)
            if ok:
                return "numactl", [numactl, *opts, "--"], None
            if membind and eff.mem_node is not None:
                opts = eff.numactl_args(False)
                ok2, err2 = _numactl_works(numactl, opts)
                if ok2:
                    _warn(f"local rank {b.local_rank}: numactl --membind={eff.mem_node} refused ({err}); "
                          f"binding cpus only")
                    return "numactl", [numactl, *opts, "--"], None
                err = err2
            _warn(f"local rank {b.local_rank}: numactl refused ({err}); using os.sched_setaffinity")
    return "affinity", [], cpus


def _child_setup(cpus: Optional[List[int]]):
    def setup() -> None:
        os.setpgid(0, 0)  # own process group: we can stop the child with its workers
        try:  # die with the launcher even if it is SIGKILLed
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        except Exception:  # pragma: no cover - non-Linux
            pass
        if cpus:
            try:
                os.sched_setaffinity(0, cpus)
            except OSError:
                pass
    return setup


# --------------------------------------------------------------------------------------------- launch
def build_command(args: argparse.Namespace, local_rank: int) -> List[str]:
    if args.no_python:
        cmd = [args.training_script]
    else:
        cmd = [sys.executable, "-u", args.training_script]
    return cmd + [f"--local_rank={local_rank}"] + list(args.training_script_args)


def child_env(args: argparse.Namespace, local_rank: int) -> Dict[str, str]:
    env = dict(os.environ)
    world = args.nproc_per_node * args.nnodes
    env.update(
        MASTER_ADDR=str(args.master_addr),
        MASTER_PORT=str(args.master_port),
        WORLD_SIZE=str(world),
        RANK=str(args.nproc_per_node * args.node_rank + local_rank),
        LOCAL_RANK=str(local_rank),
        LOCAL_WORLD_SIZE=str(args.nproc_per_node),
        NODE_RANK=str(args.node_rank),
    )
    return env


def warn_if_oversubscribed(plan: List[Binding], binding: str) -> bool:
    """Warn once when there are more ranks than cores that can be pinned: the plan then shares cores round-robin
    and every rank runs at a fraction of its speed."""
    if binding == "none":
        return False
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        allowed = None
    cores = {c for b in plan for c in (b.physical_cpus or b.cpus) if allowed is None or c in allowed}
    if len(plan) > len(cores):
        _warn(f"{len(plan)} ranks on this node but only {len(cores)} core(s) can be pinned "
              f"({cpu_list_str(sorted(cores))}): ranks share cores round-robin, each at a fraction of its speed")
        return True
    return False


def _exit_code(rc: int) -> int:
    return 128 - rc if rc < 0 else rc


def print_plan(args: argparse.Namespace, plan: List[Binding], out=sys.stdout) -> None:
    topo = args.topology
    src = f" (detected from {topo.source})" if topo is not None else ""
    binder = args.binding
    if binder == "auto":
        binder = "numactl" if shutil.which("numactl") else "sched_setaffinity"
    print(f"bind_launch plan: nnodes={args.nnodes} node_rank={args.node_rank} nproc_per_node={args.nproc_per_node} "
          f"world_size={args.nnodes * args.nproc_per_node} master={args.master_addr}:{args.master_port} "
          f"sockets={args.nsockets_per_node} cores_per_socket={args.ncores_per_socket}{src} "
          f"hyperthreads={'off' if args.no_hyperthreads else 'on'} membind={'off' if args.no_membind else 'on'} "
          f"binding={binder}", file=out)
    for b in plan:
        rank = args.nproc_per_node * args.node_rank + b.local_rank
        mem = "-" if b.mem_node is None else str(b.mem_node)
        cmd = " ".join(build_command(args, b.local_rank))
        print(f"local_rank={b.local_rank} rank={rank} socket={b.socket} cpus={cpu_list_str(b.cpus)} mem={mem} "
              f"cmd: {cmd}", file=out)
    out.flush()


class Launcher:
    def __init__(self, args: argparse.Namespace, plan: List[Binding]):
        self.args = args
        self.plan = plan
        self.procs: List[subprocess.Popen] = []
        self.stop_signal: Optional[int] = None

    def _forward(self, signum, _frame) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signum)
                except OSError:
                    pass
        if signum in STOP_SIGNALS and self.stop_signal is None:
            self.stop_signal = signum

    def start(self) -> None:
        membind = not self.args.no_membind
        for b in self.plan:
            how, prefix, cpus = resolve_binding(b, self.args.binding, membind)
            cmd = prefix + build_command(self.args, b.local_rank)
            env = child_env(self.args, b.local_rank)
            _info(f"starting local_rank={b.local_rank} rank={env['RANK']}/{env['WORLD_SIZE']} binding={how}"
                  + (f" cpus={cpu_list_str(cpus)}" if cpus else ""))
            self.procs.append(subprocess.Popen(cmd, env=env, preexec_fn=_child_setup(cpus)))

    def terminate_all(self, sig: int = signal.SIGTERM) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, sig)
                except OSError:
                    pass
        deadline = time.monotonic() + self.args.kill_timeout
        while time.monotonic() < deadline and any(p.poll() is None for p in self.procs):
            time.sleep(0.05)
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
                p.wait()

    def wait(self) -> int:
        not_converged_since: Optional[float] = None
        while True:
            if self.stop_signal is not None:
                _info(f"received signal {self.stop_signal}; stopping the children")
                self.terminate_all(signal.SIGTERM)
                return 128 + self.stop_signal
            codes = [p.poll() for p in self.procs]
            failed = [(b.local_rank, _exit_code(rc)) for b, rc in zip(self.plan, codes)
                      if rc is not None and rc != 0 and _exit_code(rc) != NOT_CONVERGED]
            if failed:
                lr, code = failed[0]
                _warn(f"local rank {lr} exited with code {code}; terminating the other processes")
                self.terminate_all(signal.SIGTERM)
                return code
            if all(rc is not None for rc in codes):
                if any(_exit_code(rc) == NOT_CONVERGED for rc in codes):
                    _info(f"training ended without reaching its quality target (exit code {NOT_CONVERGED}: not "
                          "converged, an outcome, not a crash)")
                    return NOT_CONVERGED
                return 0
            if any(rc is not None and _exit_code(rc) == NOT_CONVERGED for rc in codes):
                not_converged_since = not_converged_since or time.monotonic()
                if time.monotonic() - not_converged_since > NOT_CONVERGED_GRACE_S:
                    _warn(f"a rank ended not converged (exit code {NOT_CONVERGED}) but others still run after "
                          f"{NOT_CONVERGED_GRACE_S:.0f} s; terminating them")
                    self.terminate_all(signal.SIGTERM)
                    return NOT_CONVERGED
            time.sleep(0.1)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args.topology is not None and args.topology.threads_per_core < 2:
        args.no_hyperthreads = True  # detected: this machine has no hyperthread siblings to add
    plan = plan_bindings(args.nproc_per_node, args.nsockets_per_node, args.ncores_per_socket,
                         hyperthreads=not args.no_hyperthreads, membind=not args.no_membind)
    warn_if_oversubscribed(plan, args.binding)
    if args.dry_run:
        print_plan(args, plan)
        return 0
    launcher = Launcher(args, plan)
    for s in FORWARDED_SIGNALS:
        signal.signal(s, launcher._forward)
    try:
        launcher.start()
    except BaseException:
        launcher.terminate_all(signal.SIGTERM)
        raise
    return launcher.wait()


if __name__ == "__main__":
    sys.exit(main())
