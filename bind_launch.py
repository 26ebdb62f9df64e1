#!/usr/bin/env python3
"""Start one training process per GPU, each pinned to the cores and memory of its GPU's NUMA node.

Command-line compatible with NVIDIA's MLPerf ``bind_launch.py``::

    python -m bind_launch --nproc_per_node=8 tools/train_mlperf.py --config-file X.yaml KEY VALUE ...

By default the plan comes from the machine (sysfs): local rank ``i`` uses GPU ``i`` (PCI bus order, as
``CUDA_DEVICE_ORDER=PCI_BUS_ID``, which it sets for the children) and runs on that GPU's NUMA node (the PCI
device's ``numa_node``), with an even share of the node's physical cores (plus their hyperthread siblings, unless
``--no_hyperthreads``) and its memory (unless ``--no_membind``). CPU numbers are read, never computed, so
interleaved numbering across sockets, AMD NPS2/NPS4 and Intel sub-NUMA clustering come out right. Without GPU
placement (no GPU, or ``CUDA_VISIBLE_DEVICES`` given as UUIDs) the ranks are spread over the NUMA nodes in order;
where only some GPUs' nodes are unknown (``numa_node`` -1) the others keep theirs and each unknown one's rank goes to
the node with the fewest ranks, with a warning. The GPUs are ``nvidia-smi``'s (a Slurm job's cgroup shows only its
own); without a working one, the display controllers bound to the ``nvidia`` driver in sysfs, of which the job's are
Slurm's ``SLURM_STEP_GPUS`` (else ``SLURM_JOB_GPUS``).

``--nsockets_per_node`` and ``--ncores_per_socket`` both given: NVIDIA's arithmetic instead (rank ``i`` of ``P``
on ``S`` sockets goes to socket ``i // (P/S)``, consecutive core numbers, siblings ``+ S*cores``), for the DGX
machines it was written for, with each rank's memory on the NUMA node of its cores (NVIDIA's binds it to the
socket's number, another socket's node on an NPS4 machine); one of the two alone is refused. Each child gets
``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, ``LOCAL_WORLD_SIZE``, ``NODE_RANK`` and
``--local_rank=i``, and ``OMP_NUM_THREADS=1`` where it is unset and a node runs several ranks (as torchrun).

Beyond NVIDIA's version:

* ``--nnodes``/``--node_rank``/``--master_addr`` default to the Slurm environment when present, and
  ``--master_port`` (without ``MASTER_PORT``) to 29500 + the Slurm job id mod 1000, so two jobs sharing a node do
  not meet on one port;
* binding uses ``numactl`` when it is installed and allowed, otherwise (or when ``--membind`` is refused,
  e.g. inside a cgroup/cpuset) it falls back to ``os.sched_setaffinity`` with a warning: binding never kills
  the job;
* ``--dry-run`` prints the plan and exits;
* SIGINT/SIGTERM/SIGHUP/SIGUSR1/SIGUSR2 are forwarded to the children and stop the run (128 + signal); a
  SIGHUP ignored when the launcher starts (``nohup``) stays ignored;
* when a child exits non-zero, the others are terminated and bind_launch exits with that code
  (``128 + signal`` for a child killed by a signal); the trainer's "not converged" code (3) is an outcome that all
  ranks reach together, so the others are given time to end the same way;
* a warning, once, when the ranks outnumber the cores it can pin.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

__all__ = [
    "Binding",
    "Topology",
    "cpu_list_str",
    "parse_cpu_list",
    "detect_topology",
    "plan_bindings",
    "plan_from_topology",
    "slurm_defaults",
    "expand_hostlist",
    "main",
]

# forwarded to the ranks, and each stops the run (the trainer takes a Slurm ``--signal`` warning, SIGUSR1/SIGUSR2,
# as a stop too)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
# The trainer's exit code for a run that reached SOLVER.MAX_ITER without the quality target: an outcome that every
# rank reaches together, not a crash (maskrcnn_benchmark/cli/exit_codes.py NOT_CONVERGED; a test keeps them equal).
NOT_CONVERGED = 3
BAD_INPUT = 1  # a command line it refuses (exit_codes.py BAD_INPUT; the same test keeps it equal)
NOT_CONVERGED_GRACE_S = 120.0  # how long the other ranks may take to reach the same end


def _say(line: str) -> None:
    """A line on stderr, best effort: the reader may be gone (a ``| tee`` ended by the same Ctrl-C), and the
    launcher must still stop its ranks and exit with their code."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        try:
            sys.stderr = open(os.devnull, "w")  # and the lines after it (and the exit's flush) go nowhere
        except OSError:
            pass


def _warn(msg: str) -> None:
    _say(f"bind_launch: WARNING: {msg}")


_warned: Set[str] = set()


def _warn_once(msg: str) -> None:
    """A warning that holds for the whole node (not one rank): printed for the first rank only."""
    if msg not in _warned:
        _warned.add(msg)
        _warn(msg)


def _info(msg: str) -> None:
    _say(f"bind_launch: {msg}")


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
    """What the machine is: its online CPUs by NUMA node, the physical core of each CPU, and the NUMA node of each
    GPU (PCI ``numa_node``), read from sysfs.

    ``numa_cpus``: NUMA node -> its online CPUs (sysfs ``node*/cpulist``; one node holding every CPU when the kernel
    has no NUMA information). ``cores``: CPU -> ``(package, die, core_id)``, so hyperthread siblings share a key.
    ``gpu_numa``: the NUMA node of each GPU this process may use, in CUDA's PCI-bus order (``None``: unknown).
    The numbers are whatever the kernel says: interleaved CPU numbering, AMD NPS2/NPS4 and Intel sub-NUMA clustering
    (several NUMA nodes per socket) all come out right because nothing is derived from CPU ids.
    """
    numa_cpus: Dict[int, List[int]]
    cores: Dict[int, Tuple[int, int, int]]
    gpu_numa: List[Optional[int]] = field(default_factory=list)
    source: str = "sysfs"

    def restricted_to(self, allowed: Iterable[int]) -> "Topology":
        """The machine as this process may use it: only the CPUs of ``allowed`` (its affinity: a Slurm job
        without --exclusive, a container's cpuset), NUMA nodes left without one dropped. Planning on it shares out
        what is allowed; planning on the whole machine gave some ranks only CPUs they could not use."""
        allowed = set(allowed)
        numa = {n: [c for c in cpus if c in allowed] for n, cpus in self.numa_cpus.items()}
        numa = {n: cpus for n, cpus in numa.items() if cpus}
        if not numa:
            return self
        return Topology(numa, {c: k for c, k in self.cores.items() if c in allowed}, list(self.gpu_numa),
                        self.source)

    @property
    def nsockets(self) -> int:
        return max(1, len({c[0] for c in self.cores.values()}))

    @property
    def ncores_per_socket(self) -> int:
        per: Dict[int, set] = {}
        for key in self.cores.values():
            per.setdefault(key[0], set()).add(key)
        return max(1, min(len(c) for c in per.values())) if per else 1

    @property
    def threads_per_core(self) -> int:
        counts: Dict[Tuple[int, int, int], int] = {}
        for key in self.cores.values():
            counts[key] = counts.get(key, 0) + 1
        return max(counts.values()) if counts else 1

    def physical_cores(self, node: int) -> List[List[int]]:
        """The physical cores of NUMA node ``node``, each as its CPUs (hyperthread siblings), in CPU order."""
        by_core: Dict[Tuple[int, int, int], List[int]] = {}
        for cpu in self.numa_cpus.get(node, []):
            by_core.setdefault(self.cores.get(cpu, (-1, -1, cpu)), []).append(cpu)
        return sorted((sorted(c) for c in by_core.values()), key=lambda c: c[0])


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _online_cpus(root: str) -> List[int]:
    text = _read(os.path.join(root, "devices/system/cpu/online"))
    if text:
        return parse_cpu_list(text)
    cpus = []
    for d in glob.glob(os.path.join(root, "devices/system/cpu/cpu[0-9]*")):
        if _read(os.path.join(d, "online")) != "0":
            cpus.append(int(os.path.basename(d)[3:]))
    return sorted(cpus)


def _core_keys(root: str, cpus: Sequence[int]) -> Dict[int, Tuple[int, int, int]]:
    keys: Dict[int, Tuple[int, int, int]] = {}
    for cpu in cpus:
        d = os.path.join(root, f"devices/system/cpu/cpu{cpu}/topology")
        pkg, die, core = (_read(os.path.join(d, n)) for n in ("physical_package_id", "die_id", "core_id"))
        if pkg is None or core is None:
            keys[cpu] = (0, 0, cpu)  # no topology: every CPU its own core
        else:
            keys[cpu] = (int(pkg), int(die or 0), int(core))
    return keys


def _numa_cpus(root: str, online: Sequence[int]) -> Dict[int, List[int]]:
    nodes: Dict[int, List[int]] = {}
    online_set = set(online)
    for d in glob.glob(os.path.join(root, "devices/system/node/node[0-9]*")):
        text = _read(os.path.join(d, "cpulist"))
        cpus = [c for c in parse_cpu_list(text or "") if c in online_set]
        if cpus:
            nodes[int(os.path.basename(d)[4:])] = cpus
    if not nodes and online:
        nodes[0] = list(online)
    return nodes


def _normal_bus_id(bus_id: str) -> str:
    """nvidia-smi's ``00000000:07:00.0`` -> sysfs's ``0000:07:00.0``."""
    bus_id = bus_id.strip().lower()
    domain, _, rest = bus_id.partition(":")
    return f"{int(domain, 16):04x}:{rest}" if rest else bus_id


def gpu_bus_ids(sysfs_root: str = "/sys") -> List[str]:
    """PCI bus ids of the NVIDIA GPUs this process can see, in CUDA's PCI order: ``nvidia-smi`` (which sees only
    the GPUs of a Slurm job's cgroup), else the node's GPUs in sysfs (:func:`_sysfs_gpus`)."""
    smi = _smi_bus_ids(sysfs_root)
    return smi if smi is not None else _sysfs_gpus(sysfs_root)


def _smi_bus_ids(sysfs_root: str) -> Optional[List[str]]:
    smi = shutil.which("nvidia-smi")
    if smi and sysfs_root == "/sys":
        try:
            r = subprocess.run([smi, "--query-gpu=pci.bus_id", "--format=csv,noheader"], capture_output=True,
                               text=True, timeout=30)
            if r.returncode == 0:
                ids = [_normal_bus_id(x) for x in r.stdout.split() if x.strip()]
                if ids:
                    return sorted(ids)
        except (OSError, subprocess.SubprocessError):
            pass
    return None


def _sysfs_gpus(sysfs_root: str) -> List[str]:
    """Every GPU of the node: the devices bound to the ``nvidia`` driver whose PCI class is a display controller
    (0x03xxxx; NVSwitch bridges are bound to it too), in bus order (the driver's minor numbers, Slurm's GPU
    indices, on the usual systems)."""
    found = []
    for path in glob.glob(os.path.join(sysfs_root, "bus/pci/drivers/nvidia/[0-9a-f]*:*")):
        bus = os.path.basename(path).lower()
        pci_class = _read(os.path.join(sysfs_root, "bus/pci/devices", bus, "class"))
        if pci_class is None or pci_class.lower().startswith("0x03"):
            found.append(bus)
    return sorted(found)


def _job_gpus(node_gpus: List[str], env: Dict[str, str]) -> Optional[Tuple[List[int], List[str]]]:
    """Slurm's GPUs of this step (SLURM_STEP_GPUS, else SLURM_JOB_GPUS: indices among the node's GPUs) and their
    bus ids, or None outside Slurm or where they do not fit the node's list."""
    spec = env.get("SLURM_STEP_GPUS") or env.get("SLURM_JOB_GPUS") or ""
    items = [x.strip() for x in spec.split(",") if x.strip()]
    if not items or not all(x.isdigit() and int(x) < len(node_gpus) for x in items):
        return None
    idx = [int(x) for x in items]
    return idx, [node_gpus[i] for i in idx]


def _visible(bus_ids: List[str], env: Dict[str, str]) -> List[str]:
    """The GPUs of ``CUDA_VISIBLE_DEVICES`` (indices into the PCI-ordered list) when it is set; UUIDs or MIG
    names cannot be placed without the driver: then nothing is known."""
    spec = env.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return bus_ids
    out = []
    for item in (x.strip() for x in spec.split(",")):
        if not item:
            continue
        if not item.isdigit() or int(item) >= len(bus_ids):
            if not bus_ids or item.startswith("-"):  # no GPU here, or all hidden (-1): nothing to place
                return []
            _warn(f"CUDA_VISIBLE_DEVICES={spec} names GPUs this launcher cannot place (UUIDs, MIG devices, or an "
                  f"index beyond the {len(bus_ids)} GPUs found): the ranks are spread over the NUMA nodes in "
                  "order, not put on their GPUs' nodes")
            return []
        out.append(bus_ids[int(item)])
    return out


def gpu_numa_nodes(sysfs_root: str = "/sys", env: Optional[Dict[str, str]] = None) -> List[Optional[int]]:
    """The NUMA node of each visible GPU (sysfs ``bus/pci/devices/<bus id>/numa_node``; ``None`` where the
    firmware says -1, i.e. unknown)."""
    env = os.environ if env is None else env
    gpus = _smi_bus_ids(sysfs_root)
    if gpus is None:  # sysfs shows the node's GPUs: the job's are Slurm's
        gpus = _sysfs_gpus(sysfs_root)
        job = _job_gpus(gpus, env)
        spec = [x.strip() for x in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if x.strip()]
        # CUDA_VISIBLE_DEVICES from Slurm: the job's own indices (global), or 0..n-1 relative to the job's GPUs
        # under ConstrainDevices (CUDA sees only those)
        if job is not None:
            as_global = bool(spec) and all(x.isdigit() and int(x) in job[0] for x in spec)
            if as_global and job[0] != list(range(len(job[0]))) and all(int(x) < len(job[0]) for x in spec) and \
                    [job[0][int(x)] for x in spec] != [int(x) for x in spec]:
                _warn_once(f"CUDA_VISIBLE_DEVICES={','.join(spec)} names either the node's GPUs {','.join(spec)} "
                           f"(the job holds {','.join(map(str, job[0]))}) or, under Slurm's ConstrainDevices, the "
                           "job's GPUs at those positions; read as the node's (without nvidia-smi this launcher "
                           "cannot tell)")
            if not as_global:
                gpus = job[1]
    nodes: List[Optional[int]] = []
    for bus in _visible(gpus, env):
        text = _read(os.path.join(sysfs_root, "bus/pci/devices", bus, "numa_node"))
        node = int(text) if text is not None and text.lstrip("-").isdigit() else -1
        nodes.append(node if node >= 0 else None)
    return nodes


def _topology_from_lscpu() -> Optional[Topology]:
    exe = shutil.which("lscpu")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "-p=CPU,CORE,SOCKET,NODE"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    nodes: Dict[int, List[int]] = {}
    cores: Dict[int, Tuple[int, int, int]] = {}
    for line in out.splitlines():
        if not line or line.startswith("#"):
            continue
        fields = line.split(",")
        try:
            cpu, core, sock = (int(x) for x in fields[:3])
        except ValueError:
            continue
        node = int(fields[3]) if len(fields) > 3 and fields[3].isdigit() else 0
        nodes.setdefault(node, []).append(cpu)
        cores[cpu] = (sock, 0, core)
    return Topology(nodes, cores, [], "lscpu") if cores else None


def detect_topology(sysfs_root: str = "/sys", env: Optional[Dict[str, str]] = None) -> Topology:
    """This machine's NUMA nodes, cores and GPU placement (sysfs, then ``lscpu``, then ``os.cpu_count``)."""
    online = _online_cpus(sysfs_root)
    if online:
        topo = Topology(_numa_cpus(sysfs_root, online), _core_keys(sysfs_root, online), source="sysfs")
    else:
        topo = _topology_from_lscpu() or Topology({0: list(range(os.cpu_count() or 1))},
                                                  {c: (0, 0, c) for c in range(os.cpu_count() or 1)}, [], "cpu_count")
    topo.gpu_numa = gpu_numa_nodes(sysfs_root, env)
    return topo


def cgroup_cpuset(proc_root: str = "/proc", cgroup_root: str = "/sys/fs/cgroup") -> Optional[set]:
    """The CPUs of this process's cgroup cpuset (v2 ``cpuset.cpus.effective``, v1 ``cpuset.effective_cpus``): what
    the job may use, which a process may bind itself to; None when unknown."""
    for line in (_read(os.path.join(proc_root, "self/cgroup")) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            f = os.path.join(cgroup_root, path.lstrip("/"), "cpuset.cpus.effective")
        elif "cpuset" in controllers.split(","):
            f = os.path.join(cgroup_root, "cpuset", path.lstrip("/"), "cpuset.effective_cpus")
        else:
            continue
        cpus = parse_cpu_list(_read(f) or "")
        if cpus:
            return set(cpus)
    return None


def widen_to_cpuset(cpuset: Optional[set] = None) -> None:
    """A launcher bound to fewer CPUs than its job's cpuset (srun binds a task to its CPUs unless
    ``--cpu-bind=none``: one task per node gets one core) binds itself to the whole cpuset first, so that its ranks
    are planned on, and numactl accepts, every CPU the job may use. Only in an srun step: elsewhere a narrower
    affinity is the user's (``taskset``, ``numactl``), kept."""
    if not (os.environ.get("SLURM_STEP_ID") or os.environ.get("SLURM_STEPID")):
        return
    try:
        affinity = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return
    cpuset = cgroup_cpuset() if cpuset is None else cpuset
    if cpuset and affinity < cpuset:
        try:
            os.sched_setaffinity(0, cpuset)
        except OSError:
            return
        _info(f"this launcher was bound to cpus {cpu_list_str(sorted(affinity))} of its job's "
              f"{cpu_list_str(sorted(cpuset))} (srun binds a task unless --cpu-bind=none): its ranks are planned on "
              "all of them")


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
    socket: int                       # the NUMA node the rank runs on (NVIDIA's plans: its socket)
    cpus: List[int]
    mem_node: Optional[int]
    physical_cpus: List[int] = field(default_factory=list)

    def numactl_args(self, membind: bool = True) -> List[str]:
        args = [f"--physcpubind={cpu_list_str(self.cpus)}"]
        if membind and self.mem_node is not None:
            args.append(f"--membind={self.mem_node}")
        return args


def plan_from_topology(nproc_per_node: int, topo: Topology, hyperthreads: bool = True,
                       membind: bool = True) -> List[Binding]:
    """The plan from the machine itself: local rank ``i`` runs on the NUMA node of GPU ``i`` (its PCI
    ``numa_node``); without that knowledge the ranks are spread over the NUMA nodes in order (as many per node as
    fit evenly, the DGX layout on a 2-socket machine). The ranks of one node share its physical cores evenly, each
    core with its hyperthread siblings (unless ``hyperthreads`` is off), and its memory (``membind``). More ranks
    than cores: they share cores round-robin."""
    if nproc_per_node < 1:
        raise ValueError("nproc_per_node must be >= 1")
    nodes = sorted(n for n, cpus in topo.numa_cpus.items() if cpus)
    if not nodes:
        raise ValueError("no online CPU found")
    gpu = topo.gpu_numa[:nproc_per_node]
    in_order = [nodes[i * len(nodes) // nproc_per_node] for i in range(nproc_per_node)]
    if len(gpu) == nproc_per_node and all(n is not None and n in topo.numa_cpus for n in gpu):
        node_of = list(gpu)
    elif len(gpu) == nproc_per_node and all(n is None or n in topo.numa_cpus for n in gpu) and \
            any(n is not None for n in gpu):
        # some GPUs' nodes unknown (firmware: -1): the known ones kept, each other rank on the node with the
        # fewest ranks so far (the first such node)
        node_of = list(gpu)
        unknown = [i for i, n in enumerate(gpu) if n is None]
        for i in unknown:
            node_of[i] = min(nodes, key=lambda n: sum(1 for m in node_of if m == n))
        _warn(f"the NUMA node of the GPU of local rank {', '.join(map(str, unknown))} is unknown (sysfs numa_node "
              f"-1): {'that rank runs' if len(unknown) == 1 else 'those ranks run'} on node "
              f"{', '.join(str(node_of[i]) for i in unknown)}, maybe away from its GPU")
    else:
        node_of = in_order
        if len(gpu) == nproc_per_node and all(n is not None for n in gpu):
            _warn(f"the GPUs' NUMA nodes {sorted(set(gpu))} include one without a CPU this job may use (nodes with "
                  f"CPUs: {nodes}); the ranks are spread over those nodes instead, away from some of their GPUs")
    plan: List[Binding] = []
    for i, node in enumerate(node_of):
        sharing = [r for r, n in enumerate(node_of) if n == node]
        slot = sharing.index(i)
        cores = topo.physical_cores(node)
        per = len(cores) // len(sharing)
        mine = cores[slot * per:(slot + 1) * per] if per >= 1 else [cores[slot % len(cores)]]
        phys = [c[0] for c in mine]
        cpus = sorted(cpu for c in mine for cpu in (c if hyperthreads else c[:1]))
        plan.append(Binding(i, node, cpus, node if membind else None, phys))
    return plan


def plan_bindings(
    nproc_per_node: int,
    nsockets: int,
    ncores_per_socket: int,
    hyperthreads: bool = True,
    membind: bool = True,
    numa_cpus: Optional[Dict[int, List[int]]] = None,
) -> List[Binding]:
    """NVIDIA's core/socket/memory plan (used when the socket and core counts are given), generalised to uneven
    shapes.

    Memory: NVIDIA's plan binds it to the socket's number, which names the socket's NUMA node only with one node
    per socket. Given the machine's nodes (``numa_cpus``, sysfs), each rank's memory is the node holding most of
    its cores (AMD NPS2/NPS4, Intel sub-NUMA clustering: a node of the rank's own socket); without, the socket's
    number.

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
        plan.append(Binding(i, sock, cpus, _node_of(phys, numa_cpus, sock) if membind else None, phys))
    return plan


def _node_of(cpus: List[int], numa_cpus: Optional[Dict[int, List[int]]], default: int) -> int:
    """The NUMA node holding most of ``cpus`` (``default`` where none of them is known)."""
    counts = {n: len(set(cpus) & set(members)) for n, members in (numa_cpus or {}).items()}
    best = max(counts, key=lambda n: (counts[n], -n), default=None)
    return best if best is not None and counts[best] > 0 else default


# --------------------------------------------------------------------------------------------- slurm
def expand_hostlist(hostlist: str) -> List[str]:
    """Expand a Slurm hostlist ('node[1-3,7],gpu01', 'rack[1-2]-n[01-04]') without scontrol, in scontrol's
    order (a name with several bracket groups: the last group varies fastest, then the first, the second, ...)."""
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
        hosts.extend(_expand_name(part))
    return hosts


def _expand_name(name: str) -> List[str]:
    pieces = re.split(r"\[([^\]]*)\]", name)  # literal, ranges, literal, ranges, ..., literal
    literals, groups = pieces[0::2], [_expand_ranges(r) for r in pieces[1::2]]
    if not groups:
        return [name]
    # scontrol's order, slowest first: the groups before the last one from the last of them back to the first,
    # then the last group
    order = list(range(len(groups) - 2, -1, -1)) + [len(groups) - 1]
    out = []
    for combo in itertools.product(*(groups[i] for i in order)):
        chosen = dict(zip(order, combo))
        out.append("".join(lit + (chosen[i] if i < len(groups) else "") for i, lit in enumerate(literals)))
    return out


def _expand_ranges(ranges: str) -> List[str]:
    values: List[str] = []
    for r in ranges.split(","):
        if "-" in r:
            lo, hi = r.split("-", 1)
            width = len(lo)
            values.extend(f"{n:0{width}d}" for n in range(int(lo), int(hi) + 1))
        else:
            values.append(r)
    return values


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


class NotOnePerNode(ValueError):
    """A multi-node Slurm job started this launcher otherwise than once per node in an srun step."""


def _tasks_per_node(spec: str) -> List[int]:
    """Slurm's ``SLURM_STEP_TASKS_PER_NODE`` (``1(x4)``, ``2,1``) as counts."""
    counts = []
    for part in spec.split(","):
        n, _, rep = part.partition("(x")
        counts += [int(n)] * (int(rep.rstrip(")")) if rep else 1)
    return counts


def slurm_defaults(env: Optional[Dict[str, str]] = None, check: bool = True) -> Dict[str, object]:
    """nnodes / node_rank / master_addr taken from a Slurm job step's environment (empty outside Slurm).

    Raises :class:`NotOnePerNode` where those would be wrong: in the batch script (or an salloc shell) of a
    multi-node job, outside any srun step, this launcher would start one node's ranks and wait for the others
    until the rendezvous timed out; in a step of several tasks per node, each would start the node's ranks.
    ``check`` off (the caller gave the node count and rank): no such check."""
    env = os.environ if env is None else env
    job_nodes = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES")
    if check and env.get("SLURM_JOB_ID") and job_nodes and int(job_nodes) > 1 and not env.get("SLURM_STEP_NUM_NODES"):
        raise NotOnePerNode(f"this {job_nodes}-node Slurm job started bind_launch outside an srun step (in its batch "
                            "script?): start it once per node, srun --ntasks-per-node=1 (or give --nnodes and "
                            "--node_rank)")
    per_node = _tasks_per_node(env["SLURM_STEP_TASKS_PER_NODE"]) if env.get("SLURM_STEP_TASKS_PER_NODE") else []
    if check and any(n > 1 for n in per_node):
        raise NotOnePerNode(f"the srun step runs {env['SLURM_STEP_TASKS_PER_NODE']} tasks per node: bind_launch "
                            "starts a node's processes itself; run it once per node (srun --ntasks-per-node=1)")
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
class _Parser(argparse.ArgumentParser):
    """A refused command line in one line and the exit code of bad input (argparse: its usage block, exit 2)."""

    def error(self, message):  # type: ignore[override]
        self.exit(BAD_INPUT, f"{self.prog}: error: {message} (see --help)\n")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = _Parser(
        prog="python -m bind_launch",
        description="Launch one process per GPU, each bound to its socket's cores and memory (NVIDIA-compatible).",
    )
    p.add_argument("--nnodes", type=int, default=None, help="number of nodes (default: Slurm's, else 1)")
    p.add_argument("--node_rank", type=int, default=None,
                   help="rank of this node (default: SLURM_NODEID when nnodes > 1, else 0)")
    p.add_argument("--nproc_per_node", type=int, default=1, help="processes (GPUs) per node")
    p.add_argument("--master_addr", default=None,
                   help="rank-0 host (default with nnodes > 1: $MASTER_ADDR, else the first Slurm node; one node: "
                        "127.0.0.1)")
    p.add_argument("--master_port", type=int, default=None,
                   help="rendezvous port (default: $MASTER_PORT, else 29500 + the Slurm job id mod 1000, else 29500)")
    p.add_argument("--nsockets_per_node", type=int, default=None,
                   help="sockets per node: with --ncores_per_socket (both or neither), NVIDIA's arithmetic plan "
                        "(default: the machine's topology)")
    p.add_argument("--ncores_per_socket", type=int, default=None,
                   help="physical cores per socket: with --nsockets_per_node (both or neither)")
    p.add_argument("--no_hyperthreads", action="store_true", help="do not add the hyperthread siblings")
    p.add_argument("--no_membind", action="store_true", help="do not bind memory to the rank's NUMA node")
    p.add_argument("--binding", choices=("auto", "numactl", "affinity", "none"), default="auto",
                   help="auto: numactl if usable, else sched_setaffinity (default); none: no binding")
    p.add_argument("--kill_timeout", type=float, default=10.0,
                   help="seconds between SIGTERM and SIGKILL when stopping the children")
    p.add_argument("--no_python", action="store_true", help="run the script directly, not through Python")
    p.add_argument("--dry-run", "--dry_run", dest="dry_run", action="store_true", help="print the plan and exit")
    p.add_argument("training_script", help="the script to launch (tools/train_mlperf.py)")
    p.add_argument("training_script_args", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if (args.nsockets_per_node is None) != (args.ncores_per_socket is None):
        p.error("give both --nsockets_per_node and --ncores_per_socket (DGXNSOCKET and DGXSOCKETCORES: NVIDIA's "
                "arithmetic plan) or neither (the machine's topology)")

    try:
        sl = slurm_defaults(check=args.nnodes is None or (args.node_rank is None and args.nnodes > 1))
    except NotOnePerNode as e:
        p.error(str(e))
    if args.nnodes is None:
        args.nnodes = int(sl.get("nnodes", 1))
    if args.node_rank is None:
        args.node_rank = int(sl.get("node_rank", 0)) if args.nnodes > 1 else 0
    if args.master_addr is None:
        # one node (also one node of a multi-node step asked for alone, a check on each): its own loopback, whatever
        # MASTER_ADDR the job exported for its multi-node runs (the job's first node)
        args.master_addr = "127.0.0.1" if args.nnodes == 1 else \
            os.environ.get("MASTER_ADDR") or str(sl.get("master_addr", "127.0.0.1"))
    if args.master_port is None:  # a job's own port: two jobs sharing a node must not meet on 29500
        job = os.environ.get("SLURM_JOB_ID", "")
        args.master_port = int(os.environ.get("MASTER_PORT") or (29500 + int(job) % 1000 if job.isdigit() else 29500))
    # Both counts given: NVIDIA's arithmetic plan (compatibility). Otherwise the machine's own topology decides.
    widen_to_cpuset()
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        allowed = None
    args.topology = detect_topology()
    if allowed is not None:
        args.topology = args.topology.restricted_to(allowed)
    args.explicit_shape = args.nsockets_per_node is not None and args.ncores_per_socket is not None
    if args.nsockets_per_node is None:
        args.nsockets_per_node = args.topology.nsockets
    if args.ncores_per_socket is None:
        args.ncores_per_socket = args.topology.ncores_per_socket
    if not args.explicit_shape and args.topology.threads_per_core < 2:
        args.no_hyperthreads = True  # detected: this machine has no hyperthread siblings to add
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
            _warn_once("numactl not found; binding with os.sched_setaffinity (no memory binding)")
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
    launcher = os.getpid()

    def setup() -> None:
        os.setpgid(0, 0)  # own process group: we can stop the child with its workers
        try:  # die with the launcher even if it is SIGKILLed
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        except Exception:  # pragma: no cover - non-Linux
            pass
        if os.getppid() != launcher:  # the launcher died between the fork and the request: none to die with
            os._exit(1)
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
    # CUDA's device i must be the plan's GPU i (PCI order), whatever the environment says: CUDA's own default,
    # FASTEST_FIRST, set explicitly or not, may order the GPUs otherwise and bind each rank beside another's GPU
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if args.nproc_per_node > 1:  # as torchrun: not one OpenMP pool of every core per rank (the image's
        env.setdefault("OMP_NUM_THREADS", "1")  # %environment says 1 too; pyxis and the hosts have none)
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
    binder = args.binding
    if binder == "auto":
        binder = "numactl" if shutil.which("numactl") else "sched_setaffinity"
    if args.explicit_shape:
        shape = f"sockets={args.nsockets_per_node} cores_per_socket={args.ncores_per_socket} (given)"
    else:
        gpus = ",".join("?" if n is None else str(n) for n in topo.gpu_numa) or "none"
        shape = (f"sockets={args.nsockets_per_node} cores_per_socket={args.ncores_per_socket} (detected from "
                 f"{topo.source}) numa_nodes={cpu_list_str(topo.numa_cpus)} gpu_numa_nodes={gpus}")
    print(f"bind_launch plan: nnodes={args.nnodes} node_rank={args.node_rank} nproc_per_node={args.nproc_per_node} "
          f"world_size={args.nnodes * args.nproc_per_node} master={args.master_addr}:{args.master_port} {shape} "
          f"hyperthreads={'off' if args.no_hyperthreads else 'on'} membind={'off' if args.no_membind else 'on'} "
          f"binding={binder}", file=out)
    for b in plan:
        rank = args.nproc_per_node * args.node_rank + b.local_rank
        mem = "-" if b.mem_node is None else str(b.mem_node)
        cmd = " ".join(build_command(args, b.local_rank))
        print(f"local_rank={b.local_rank} rank={rank} socket={b.socket} cpus={cpu_list_str(b.cpus)} mem={mem} "
              f"cmd: {cmd}", file=out)
    out.flush()


def _group_holds_our_processes(pgid: int) -> bool:
    """Whether process group ``pgid`` holds a process of this launcher's session (a rank's group: its leader or
    what it left). Without /proc (not Linux): assumed."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    session = os.getsid(0)
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # state, ppid, pgrp, session, ...
        if len(fields) > 3 and int(fields[2]) == pgid and int(fields[3]) == session and fields[0] != "Z":
            return True
    return False


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
        if self.stop_signal is None:
            self.stop_signal = signum

    def start(self) -> None:
        membind = not self.args.no_membind
        for b in self.plan:
            if self.stop_signal is not None:  # stopped while starting: wait() stops those already running
                _info(f"received signal {self.stop_signal} while starting the ranks; starting no more")
                return
            how, prefix, cpus = resolve_binding(b, self.args.binding, membind)
            cmd = prefix + build_command(self.args, b.local_rank)
            env = child_env(self.args, b.local_rank)
            _info(f"starting local_rank={b.local_rank} rank={env['RANK']}/{env['WORLD_SIZE']} binding={how}"
                  + (f" cpus={cpu_list_str(cpus)}" if cpus else ""))
            self.procs.append(subprocess.Popen(cmd, env=env, preexec_fn=_child_setup(cpus)))

    def terminate_all(self, sig: int = signal.SIGTERM) -> None:
        """``sig`` to every rank's process group, then SIGKILL to what is left after ``--kill_timeout``. A rank
        that already ended is in it too, while its own group (each rank leads one) holds processes it left
        behind (a scoring process, loader workers): an emptied group's number is free, and Linux can give it to
        an unrelated process group."""
        groups = [p.pid for p in self.procs if p.poll() is None or _group_holds_our_processes(p.pid)]
        for pgid in groups:
            try:
                os.killpg(pgid, sig)
            except OSError:  # the group is gone
                pass
        deadline = time.monotonic() + self.args.kill_timeout
        while time.monotonic() < deadline and any(p.poll() is None for p in self.procs):
            time.sleep(0.05)
        for pgid in groups:
            if _group_holds_our_processes(pgid):
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except OSError:
                    pass
        for p in self.procs:
            p.wait()

    def wait(self) -> int:
        not_converged_since: Optional[float] = None
        while True:
            if self.stop_signal is not None:
                _info(f"received signal {self.stop_signal}; stopping the children")
                self.terminate_all(signal.SIGTERM)
                # ranks whose run had ended (run_stop logged: the trainer holds its outcome then) exit with it
                codes = {_exit_code(p.returncode) for p in self.procs if p.returncode is not None}
                if len(codes) == 1 and len(self.procs) == len(self.plan) and \
                        all(p.returncode is not None and p.returncode >= 0 for p in self.procs) and \
                        codes <= {0, NOT_CONVERGED}:
                    return codes.pop()
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


def make_plan(args: argparse.Namespace) -> List[Binding]:
    if args.explicit_shape:
        return plan_bindings(args.nproc_per_node, args.nsockets_per_node, args.ncores_per_socket,
                             hyperthreads=not args.no_hyperthreads, membind=not args.no_membind,
                             numa_cpus=args.topology.numa_cpus)
    return plan_from_topology(args.nproc_per_node, args.topology, hyperthreads=not args.no_hyperthreads,
                              membind=not args.no_membind)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    plan = make_plan(args)
    warn_if_oversubscribed(plan, args.binding)
    if args.dry_run:
        print_plan(args, plan)
        return 0
    if not args.no_python and not os.path.isfile(args.training_script):  # else each rank fails, exit 2 ("diverged")
        print(f"python -m bind_launch: error: the training script '{args.training_script}' does not exist "
              f"(in {os.getcwd()})", file=sys.stderr)
        return BAD_INPUT
    launcher = Launcher(args, plan)
    for s in STOP_SIGNALS:
        # nohup's ignored hangup stays ignored (the ranks inherit it); SIGINT is forwarded even when ignored at
        # start: run_and_time.sh starts the launcher in the background, where a shell ignores it, and forwards it
        if s == signal.SIGHUP and signal.getsignal(s) == signal.SIG_IGN:
            continue
        signal.signal(s, launcher._forward)
    try:
        launcher.start()
    except BaseException:
        launcher.terminate_all(signal.SIGTERM)
        raise
    return launcher.wait()


if __name__ == "__main__":
    sys.exit(main())
