"""bind_launch: plans (NVIDIA's worked examples), topology/Slurm defaults, binding fallbacks, failure handling."""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

import bind_launch as bl  # noqa: E402


def fmt(b):
    return bl.cpu_list_str(b.cpus), b.mem_node


# ------------------------------------------------------------------------------------------------ plans
def test_dgx1_plan_matches_nvidia_examples():
    plan = bl.plan_bindings(8, nsockets=2, ncores_per_socket=20)
    assert fmt(plan[0]) == ("0-4,40-44", 0)
    assert fmt(plan[4]) == ("20-24,60-64", 1)
    assert [fmt(b) for b in plan] == [
        ("0-4,40-44", 0), ("5-9,45-49", 0), ("10-14,50-54", 0), ("15-19,55-59", 0),
        ("20-24,60-64", 1), ("25-29,65-69", 1), ("30-34,70-74", 1), ("35-39,75-79", 1),
    ]
    assert [b.socket for b in plan] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_dgxa100_plan():
    plan = bl.plan_bindings(8, nsockets=2, ncores_per_socket=64)
    assert fmt(plan[0]) == ("0-15,128-143", 0)
    assert fmt(plan[3]) == ("48-63,176-191", 0)
    assert fmt(plan[4]) == ("64-79,192-207", 1)
    assert fmt(plan[7]) == ("112-127,240-255", 1)


def test_no_hyperthreads_no_membind():
    plan = bl.plan_bindings(8, 2, 20, hyperthreads=False, membind=False)
    assert fmt(plan[4]) == ("20-24", None)
    assert plan[4].numactl_args(True) == ["--physcpubind=20-24"]
    plan = bl.plan_bindings(8, 2, 20)
    assert plan[4].numactl_args(True) == ["--physcpubind=20-24,60-64", "--membind=1"]


def test_uneven_shapes():
    # fewer processes than sockets: one socket each
    plan = bl.plan_bindings(1, 2, 4, hyperthreads=False)
    assert fmt(plan[0]) == ("0-3", 0)
    # more processes than cores: share round-robin, never an empty set
    plan = bl.plan_bindings(4, 1, 2, hyperthreads=False)
    assert [bl.cpu_list_str(b.cpus) for b in plan] == ["0", "1", "0", "1"]
    # 2 per socket out of 3 cores: 1 core each
    plan = bl.plan_bindings(4, 2, 3, hyperthreads=False)
    assert [fmt(b) for b in plan] == [("0", 0), ("1", 0), ("3", 1), ("4", 1)]
    with pytest.raises(ValueError):
        bl.plan_bindings(0, 1, 1)


def test_cpu_list_roundtrip():
    assert bl.parse_cpu_list("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert bl.cpu_list_str([11, 10, 8, 3, 2, 1, 0]) == "0-3,8,10-11"
    assert bl.cpu_list_str([]) == ""


# ------------------------------------------------------------------------------------------------ topology
def _fake_sysfs(root: Path, cpus, gpus=()) -> None:
    """A sysfs tree: ``cpus`` = [(cpu, package, core_id, numa node)], ``gpus`` = [(pci bus id, numa node)]."""
    nodes = {}
    for cpu, pkg, core, node in cpus:
        d = root / "devices/system/cpu" / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "physical_package_id").write_text(f"{pkg}\n")
        (d / "core_id").write_text(f"{core}\n")
        nodes.setdefault(node, []).append(cpu)
    (root / "devices/system/cpu/online").write_text(bl.cpu_list_str(c[0] for c in cpus) + "\n")
    for node, members in nodes.items():
        d = root / "devices/system/node" / f"node{node}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(bl.cpu_list_str(members) + "\n")
    (root / "devices/system/node/online").write_text(bl.cpu_list_str(nodes) + "\n")
    for bus, node in gpus:
        dev = root / "bus/pci/devices" / bus
        dev.mkdir(parents=True)
        (dev / "numa_node").write_text(f"{node}\n")
        drv = root / "bus/pci/drivers/nvidia"
        drv.mkdir(parents=True, exist_ok=True)
        (drv / bus).symlink_to(dev)


def _dgx_cpus(sockets, cores, threads, nodes_per_socket=1):
    """Linux's usual numbering: all first threads socket by socket, then all second threads."""
    out = []
    per_node = cores // nodes_per_socket
    for t in range(threads):
        for s in range(sockets):
            for c in range(cores):
                out.append((t * sockets * cores + s * cores + c, s, c, s * nodes_per_socket + c // per_node))
    return out


def test_detect_topology_from_sysfs(tmp_path):
    _fake_sysfs(tmp_path, _dgx_cpus(2, 20, 2))
    topo = bl.detect_topology(str(tmp_path), env={})
    assert (topo.nsockets, topo.ncores_per_socket, topo.threads_per_core, topo.source) == (2, 20, 2, "sysfs")
    assert bl.numa_nodes(str(tmp_path)) == [0, 1]
    assert topo.gpu_numa == []
    # no GPU placement: the DGX-1 layout, the same plan as NVIDIA's arithmetic
    plan = bl.plan_from_topology(8, topo)
    assert [fmt(b) for b in plan] == [fmt(b) for b in bl.plan_bindings(8, 2, 20)]


def test_interleaved_cpu_numbering(tmp_path):
    """CPU 0 on socket 0, CPU 1 on socket 1, ...: the arithmetic plan would put rank 0 on both sockets."""
    cpus = [(2 * c + s, s, c, s) for s in range(2) for c in range(8)]
    _fake_sysfs(tmp_path, cpus)
    plan = bl.plan_from_topology(4, bl.detect_topology(str(tmp_path), env={}))
    assert [fmt(b) for b in plan] == [("0,2,4,6", 0), ("8,10,12,14", 0), ("1,3,5,7", 1), ("9,11,13,15", 1)]
    arithmetic = bl.plan_bindings(4, 2, 8, hyperthreads=False)
    assert fmt(arithmetic[0]) == ("0-3", 0)  # CPUs 1 and 3 are on socket 1: what the topology plan avoids


def test_amd_nps4_gpus_on_their_own_nodes(tmp_path):
    """2 sockets x 64 cores, NPS4 (8 NUMA nodes of 16 cores, SMT2), 8 GPUs each behind another node, as on
    AMD-based 8-GPU servers: every rank on its GPU's node, with that node's memory."""
    cpus = _dgx_cpus(2, 64, 2, nodes_per_socket=4)
    gpu_nodes = [3, 2, 1, 0, 7, 6, 5, 4]
    gpus = [(f"0000:{bus:02x}:00.0", n) for bus, n in zip((0x07, 0x0f, 0x47, 0x4e, 0x87, 0x90, 0xb7, 0xbd),
                                                          gpu_nodes)]
    _fake_sysfs(tmp_path, cpus, gpus)
    topo = bl.detect_topology(str(tmp_path), env={})
    assert topo.gpu_numa == gpu_nodes and len(topo.numa_cpus) == 8
    plan = bl.plan_from_topology(8, topo)
    assert [b.mem_node for b in plan] == gpu_nodes
    assert fmt(plan[0]) == ("48-63,176-191", 3)
    assert fmt(plan[4]) == ("112-127,240-255", 7)
    # two ranks per GPU node would split its 16 cores
    topo.gpu_numa = [3, 3]
    assert [fmt(b) for b in bl.plan_from_topology(2, topo)] == [("48-55,176-183", 3), ("56-63,184-191", 3)]


def test_a_job_with_part_of_the_machine_shares_out_what_it_may_use(tmp_path):
    """A DGX H100 (2 x 56 cores, siblings + 112), the job's GPUs 0-3 on node 0 but only CPUs 0-27,112-139 allowed
    (Slurm without --exclusive, a container's cpuset): planned on the whole node, ranks 2 and 3 got cores 28-55
    and ran unbound; planned on what is allowed, each of the 4 ranks gets 7 cores and their siblings, disjoint."""
    gpus = [(f"0000:{bus:02x}:00.0", 0) for bus in (0x1b, 0x43, 0x52, 0x61)]
    _fake_sysfs(tmp_path, _dgx_cpus(2, 56, 2), gpus)
    allowed = set(range(0, 28)) | set(range(112, 140))
    topo = bl.detect_topology(str(tmp_path), env={}).restricted_to(allowed)
    plan = bl.plan_from_topology(4, topo)
    assert [fmt(b) for b in plan] == [("0-6,112-118", 0), ("7-13,119-125", 0), ("14-20,126-132", 0),
                                      ("21-27,133-139", 0)]
    # allowed CPUs only on node 1 while the GPUs sit on node 0: spread over node 1, with a warning
    topo = bl.detect_topology(str(tmp_path), env={}).restricted_to(set(range(56, 84)) | set(range(168, 196)))
    plan = bl.plan_from_topology(4, topo)
    assert {b.mem_node for b in plan} == {1} and all(set(b.cpus) <= set(range(56, 84)) | set(range(168, 196))
                                                     for b in plan)


def test_the_jobs_cpuset_is_read_from_cgroup_v1_and_v2(tmp_path):
    (tmp_path / "proc" / "self").mkdir(parents=True)
    cg = tmp_path / "cg"
    # cgroup v2 (Slurm's cgroup/v2 plugin: the step's task cgroup)
    (tmp_path / "proc" / "self" / "cgroup").write_text("0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n")
    d = cg / "system.slice/slurmstepd.scope/job_7/step_0/user/task_0"
    d.mkdir(parents=True)
    (d / "cpuset.cpus.effective").write_text("0-27,112-139\n")
    assert bl.cgroup_cpuset(str(tmp_path / "proc"), str(cg)) == set(range(28)) | set(range(112, 140))
    # cgroup v1 (the cpuset controller's own hierarchy)
    (tmp_path / "proc" / "self" / "cgroup").write_text("4:memory:/slurm/uid_0/job_7\n3:cpuset:/slurm/uid_0/job_7/step_0\n")
    d = cg / "cpuset/slurm/uid_0/job_7/step_0"
    d.mkdir(parents=True)
    (d / "cpuset.effective_cpus").write_text("0-3\n")
    assert bl.cgroup_cpuset(str(tmp_path / "proc"), str(cg)) == {0, 1, 2, 3}
    assert bl.cgroup_cpuset(str(tmp_path / "nowhere"), str(cg)) is None


def test_a_launcher_bound_to_one_core_by_srun_widens_to_the_jobs_cpuset(monkeypatch, capsys):
    """srun without --cpu-bind=none binds a one-task-per-node step to a core: every rank would be planned on it
    (and numactl refuses CPUs outside the caller's mask). The launcher first binds itself to the job's cpuset."""
    calls = []
    monkeypatch.setattr(bl.os, "sched_getaffinity", lambda pid: {0})
    monkeypatch.setattr(bl.os, "sched_setaffinity", lambda pid, cpus: calls.append(set(cpus)))
    monkeypatch.setenv("SLURM_STEP_ID", "0")
    bl.widen_to_cpuset({0, 1, 2, 3})
    assert calls == [{0, 1, 2, 3}]
    assert "bound to cpus 0 of its job's 0-3 (srun binds a task unless --cpu-bind=none)" in capsys.readouterr().err
    bl.widen_to_cpuset({0})  # already all of it: nothing to do
    assert calls == [{0, 1, 2, 3}]


def test_a_launcher_narrowed_by_its_user_outside_slurm_keeps_its_cpus(monkeypatch, capsys):
    """``taskset -c 0-27 python -m bind_launch ...`` (two jobs sharing a node, each on its own cores) outside Slurm:
    the launcher widened itself to the whole cpuset and planned its ranks on the other job's cores too. Only an
    srun step's binding is widened."""
    calls = []
    monkeypatch.setattr(bl.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(bl.os, "sched_setaffinity", lambda pid, cpus: calls.append(set(cpus)))
    for name in ("SLURM_STEP_ID", "SLURM_STEPID"):
        monkeypatch.delenv(name, raising=False)
    bl.widen_to_cpuset({0, 1, 2, 3})
    assert calls == [] and capsys.readouterr().err == ""


def test_intel_sub_numa_clustering(tmp_path):
    """2 sockets x 56 cores with SNC2 (4 NUMA nodes), HT siblings numbered + 112, 8 GPUs two per node."""
    cpus = _dgx_cpus(2, 56, 2, nodes_per_socket=2)
    gpus = [(f"0000:{0x18 + 16 * i:02x}:00.0", i // 2) for i in range(8)]
    _fake_sysfs(tmp_path, cpus, gpus)
    plan = bl.plan_from_topology(8, bl.detect_topology(str(tmp_path), env={}))
    assert [fmt(b) for b in plan] == [
        ("0-13,112-125", 0), ("14-27,126-139", 0), ("28-41,140-153", 1), ("42-55,154-167", 1),
        ("56-69,168-181", 2), ("70-83,182-195", 2), ("84-97,196-209", 3), ("98-111,210-223", 3)]


def test_cuda_visible_devices_selects_the_gpus(tmp_path, capsys):
    """A Slurm job given GPUs 4-7 (CUDA_VISIBLE_DEVICES=4,5,6,7): its local ranks 0-3 go to socket 1."""
    cpus = _dgx_cpus(2, 8, 1)
    gpus = [(f"0000:{0x10 + i:02x}:00.0", i // 4) for i in range(8)]
    _fake_sysfs(tmp_path, cpus, gpus)
    topo = bl.detect_topology(str(tmp_path), env={"CUDA_VISIBLE_DEVICES": "4,5,6,7"})
    assert topo.gpu_numa == [1, 1, 1, 1]
    assert [fmt(b) for b in bl.plan_from_topology(4, topo)] == [("8-9", 1), ("10-11", 1), ("12-13", 1),
                                                                 ("14-15", 1)]
    # UUIDs cannot be placed without the driver: spread over the nodes instead, and said so
    capsys.readouterr()
    topo = bl.detect_topology(str(tmp_path), env={"CUDA_VISIBLE_DEVICES": "GPU-1234,GPU-5678"})
    assert topo.gpu_numa == [] and [b.mem_node for b in bl.plan_from_topology(2, topo)] == [0, 1]
    assert "CUDA_VISIBLE_DEVICES=GPU-1234,GPU-5678 names GPUs this launcher cannot place" in capsys.readouterr().err
    # every GPU hidden (-1): nothing to place, nothing to say
    assert bl.detect_topology(str(tmp_path), env={"CUDA_VISIBLE_DEVICES": "-1"}).gpu_numa == []
    assert "cannot place" not in capsys.readouterr().err


def test_unknown_gpu_numa_node_falls_back_to_spreading(tmp_path):
    cpus = _dgx_cpus(2, 4, 1)
    _fake_sysfs(tmp_path, cpus, [("0000:01:00.0", -1), ("0000:02:00.0", -1)])
    topo = bl.detect_topology(str(tmp_path), env={})
    assert topo.gpu_numa == [None, None]
    assert [fmt(b) for b in bl.plan_from_topology(2, topo)] == [("0-3", 0), ("4-7", 1)]


def test_detect_topology_this_machine():
    topo = bl.detect_topology()
    assert topo.nsockets >= 1 and topo.ncores_per_socket >= 1
    assert topo.nsockets * topo.ncores_per_socket * topo.threads_per_core >= len(os.sched_getaffinity(0))


# ------------------------------------------------------------------------------------------------ slurm
def test_expand_hostlist():
    assert bl.expand_hostlist("node[1-3,7],gpu01") == ["node1", "node2", "node3", "node7", "gpu01"]
    assert bl.expand_hostlist("tara-dgx[008-010]") == ["tara-dgx008", "tara-dgx009", "tara-dgx010"]
    assert bl.expand_hostlist("single") == ["single"]
    # two bracket groups in one name (rack-and-node naming): Slurm expands them prefix-major (scontrol's output)
    assert bl.expand_hostlist("rack[1-2]-n[01-02]") == ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]
    assert bl.expand_hostlist("a[001-002,5]") == ["a001", "a002", "a5"]


HOSTLISTS = ["node[1-3,7],gpu01", "tara-dgx[008-010]", "single", "h1,h2", "a[8-11]", "a[001-002,5]",
             "rack[1-2]-n[01-02]", "x[1-2],y[3-4]", "dc1-rack[07-08]-gpu[1-3],login01", "a[1-3]b[4-5]c[6-7]",
             "w[1-2]x[3-4]y[5-6]z[7-8]"]


@pytest.mark.slow
def test_expand_hostlist_agrees_with_scontrol(tmp_path):
    """The oracle is Slurm's own expansion (``scontrol show hostnames``: a local call, it needs only a config)."""
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        pytest.skip("scontrol is not installed (tests/cluster/install_deps.sh installs slurm-wlm)")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=t\nSlurmctldHost=localhost\nNodeName=localhost CPUs=1\nPartitionName=p Nodes=localhost\n")
    for hostlist in HOSTLISTS:
        out = subprocess.run([scontrol, "show", "hostnames", hostlist], capture_output=True, text=True, check=True,
                             env={**os.environ, "SLURM_CONF": str(conf)})
        assert bl.expand_hostlist(hostlist) == out.stdout.split(), hostlist


def test_slurm_defaults():
    env = {"SLURM_JOB_NUM_NODES": "4", "SLURM_NODEID": "2", "SLURM_JOB_NODELIST": "bogusnode[3-6]",
           "PATH": "/nonexistent"}
    old = os.environ.copy()
    try:
        os.environ["PATH"] = "/nonexistent"  # no scontrol: parse the hostlist ourselves
        assert bl.slurm_defaults(env) == {"nnodes": 4, "node_rank": 2, "master_addr": "bogusnode3"}
    finally:
        os.environ.clear()
        os.environ.update(old)
    assert bl.slurm_defaults({}) == {}
    # a one-node job keeps the loopback master
    assert bl.slurm_defaults({"SLURM_NNODES": "1", "SLURM_NODEID": "0", "SLURM_NODELIST": "n1"}) == {
        "nnodes": 1, "node_rank": 0}


def test_a_multi_node_job_must_start_one_launcher_per_node_in_a_step(monkeypatch):
    """In the batch script of a 4-node job (no srun step: SLURM_STEP_* unset, SLURM_NODEID 0) the launcher would
    start node 0's ranks and wait for 24 others until the rendezvous timed out; in a step of 8 tasks per node
    each task would start the node's 8 ranks with the same RANKs. Both refused, naming the fix; a step of one task
    per node (what the Slurm job and run_and_time.sh do) is the Slurm defaults' case."""
    monkeypatch.setenv("PATH", "/nonexistent")  # no scontrol: the hostlist parsed here
    batch = {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "4", "SLURM_NODEID": "0",
             "SLURM_JOB_NODELIST": "127.0.0.[1-4]"}
    with pytest.raises(bl.NotOnePerNode, match=r"4-node Slurm job started bind_launch outside an srun step .* "
                                               r"srun --ntasks-per-node=1"):
        bl.slurm_defaults(batch)
    assert bl.slurm_defaults(batch, check=False)["master_addr"] == "127.0.0.1"  # --nnodes/--node_rank given
    step = dict(batch, SLURM_STEP_NUM_NODES="4", SLURM_STEP_NODELIST="127.0.0.[1-4]", SLURM_NODEID="2")
    with pytest.raises(bl.NotOnePerNode, match=r"runs 8\(x4\) tasks per node"):
        bl.slurm_defaults(dict(step, SLURM_STEP_TASKS_PER_NODE="8(x4)"))
    assert bl.slurm_defaults(dict(step, SLURM_STEP_TASKS_PER_NODE="1(x4)")) == {
        "nnodes": 4, "node_rank": 2, "master_addr": "127.0.0.1"}
    # asked for one node there (--nnodes 1): nothing to refuse
    monkeypatch.setattr(bl, "widen_to_cpuset", lambda *a, **k: None)  # this test process's own affinity stays
    for k, v in batch.items():
        monkeypatch.setenv(k, v)
    assert bl.parse_args(["--nnodes", "1", "--binding=none", "x.py"]).nnodes == 1
    with pytest.raises(SystemExit):
        bl.parse_args(["--binding=none", "x.py"])
    # a one-node allocation's own shell: one launcher, nothing to refuse
    assert bl.slurm_defaults({"SLURM_JOB_ID": "8", "SLURM_JOB_NUM_NODES": "1", "SLURM_NODEID": "0"}) == {
        "nnodes": 1, "node_rank": 0}


def test_one_node_asked_for_in_a_multi_node_step_is_this_node_alone(monkeypatch):
    """``srun -N4 python -m bind_launch --nnodes=1 ...`` (a check run on each node by itself): the node's rank and
    the master were still the step's, so nodes 1-3 were refused (node_rank not in [0, 1)) and, with --node_rank 0,
    every node's ranks met at the step's first host, eight ranks 0 from four nodes. One node is its own rank 0
    and master; a node count that is the step's keeps the step's."""
    monkeypatch.setenv("PATH", "/nonexistent")  # no scontrol: the hostlist parsed here
    monkeypatch.setattr(bl, "widen_to_cpuset", lambda *a, **k: None)  # this test process's own affinity stays
    monkeypatch.setenv("MASTER_ADDR", "10.1.0.1")  # run_experiments.sh and submit.py export the job's first node
    step = {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "4", "SLURM_STEP_NUM_NODES": "4", "SLURM_NODEID": "2",
            "SLURM_STEP_NODELIST": "10.1.0.[1-4]", "SLURM_STEP_TASKS_PER_NODE": "1(x4)"}
    for k, v in step.items():
        monkeypatch.setenv(k, v)
    one = bl.parse_args(["--nnodes", "1", "--binding=none", "x.py"])
    assert (one.nnodes, one.node_rank, one.master_addr) == (1, 0, "127.0.0.1")
    four = bl.parse_args(["--nnodes", "4", "--binding=none", "x.py"])
    assert (four.nnodes, four.node_rank, four.master_addr) == (4, 2, "10.1.0.1")
    default = bl.parse_args(["--binding=none", "x.py"])
    assert (default.nnodes, default.node_rank, default.master_addr) == (4, 2, "10.1.0.1")
    given = bl.parse_args(["--nnodes", "1", "--master_addr", "10.1.0.3", "--binding=none", "x.py"])
    assert given.master_addr == "10.1.0.3"


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLURM_") and k not in ("MASTER_ADDR", "MASTER_PORT")}
    env.update(extra)
    return env


def run_bl(args, env=None, timeout=60, **kw):
    return subprocess.run([sys.executable, "-m", "bind_launch", *args], cwd=ROOT, env=env or _clean_env(),
                          capture_output=True, text=True, timeout=timeout, **kw)


@pytest.mark.slow
def test_dry_run_dgx1_and_slurm_env():
    r = run_bl(["--dry-run", "--nsockets_per_node=2", "--ncores_per_socket=20", "--nproc_per_node=8",
                "tools/train_mlperf.py", "--config-file", "c.yaml", "SOLVER.BASE_LR", "0.06"],
               env=_clean_env(SLURM_JOB_NUM_NODES="4", SLURM_NODEID="1", SLURM_JOB_NODELIST="dgx[01-04]",
                              PATH="/usr/bin:/bin"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "world_size=32" in lines[0] and "master=dgx01:29500" in lines[0] and "node_rank=1" in lines[0]
    assert lines[1].startswith("local_rank=0 rank=8 socket=0 cpus=0-4,40-44 mem=0 cmd: ")
    assert lines[1].endswith("tools/train_mlperf.py --local_rank=0 --config-file c.yaml SOLVER.BASE_LR 0.06")
    assert lines[5].startswith("local_rank=4 rank=12 socket=1 cpus=20-24,60-64 mem=1")


@pytest.mark.slow
def test_dry_run_defaults_to_real_topology():
    r = run_bl(["--dry-run", "--nproc_per_node=2", "x.py"])
    assert r.returncode == 0, r.stderr
    topo = bl.detect_topology()
    assert f"sockets={topo.nsockets} cores_per_socket={topo.ncores_per_socket} (detected from" in r.stdout
    assert "master=127.0.0.1:29500" in r.stdout


# ------------------------------------------------------------------------------------------------ real launches
CHILD = textwrap.dedent("""
    import json, os, sys, time, signal
    out = os.environ["TEST_OUT"]
    lr = [a for a in sys.argv[1:] if a.startswith("--local_rank=")][0].split("=")[1]
    info = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    info["argv"] = sys.argv[1:]
    info["affinity"] = sorted(os.sched_getaffinity(0))
    info["pid"] = os.getpid()
    def on_term(signum, frame):
        open(os.path.join(out, f"term{lr}"), "w").write(str(signum))
        sys.exit(0 if os.environ.get("EXIT0_ON_TERM") else 1)
    signal.signal(signal.SIGTERM, on_term)
    with open(os.path.join(out, f"rank{lr}.json"), "w") as f:
        json.dump(info, f)
    mode = os.environ.get("CHILD_MODE", "ok")
    if mode == "ok":
        sys.exit(0)
    if mode == "fail" and lr == "1":
        time.sleep(0.5); sys.exit(7)
    if mode == "fail_leaving_a_child" and lr == "1":  # a rank that dies, leaving a process of its own behind
        import subprocess
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open(os.path.join(out, "helper.pid"), "w").write(str(helper.pid))
        time.sleep(0.5); os._exit(7)
    if mode == "not_converged":  # every rank reaches MAX_ITER without the target; rank 0 a little earlier
        time.sleep(0.2 if lr == "0" else 1.5); sys.exit(3)
    if mode == "kill" and lr == "1":
        time.sleep(1.0); os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(120)
""")


@pytest.fixture
def child(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    out = tmp_path / "out"
    out.mkdir()
    return script, out


def _read_ranks(out, n):
    return [json.loads((out / f"rank{i}.json").read_text()) for i in range(n)]


def _fake_numactl(bindir: Path, refuse: str) -> None:
    """A numactl stand-in: refuses --membind (refuse='membind') or everything (refuse='all')."""
    bindir.mkdir()
    exe = bindir / "numactl"
    exe.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import os, sys
        args = sys.argv[1:]
        sep = args.index("--")
        opts, cmd = args[:sep], args[sep + 1:]
        if {refuse!r} == "all" or any(o.startswith("--membind") for o in opts):
            print("set_mempolicy: Operation not permitted", file=sys.stderr)
            sys.exit(1)
        for o in opts:
            if o.startswith("--physcpubind="):
                spec = o.split("=", 1)[1]
                cpus = set()
                for p in spec.split(","):
                    lo, _, hi = p.partition("-")
                    cpus.update(range(int(lo), int(hi or lo) + 1))
                os.sched_setaffinity(0, cpus)
        os.execvp(cmd[0], cmd)
        """))
    exe.chmod(0o755)


def _expected_affinity(nproc):
    topo = bl.detect_topology()
    plan = bl.plan_from_topology(nproc, topo, hyperthreads=topo.threads_per_core > 1)
    allowed = os.sched_getaffinity(0)
    return [sorted(c for c in b.cpus if c in allowed) for b in plan]


@pytest.mark.slow
def test_launch_env_args_and_binding(child):
    script, out = child
    r = run_bl(["--nproc_per_node=2", "--master_port=29123", str(script), "--foo", "bar"],
               env=_clean_env(TEST_OUT=str(out)))
    assert r.returncode == 0, r.stderr
    ranks = _read_ranks(out, 2)
    for i, info in enumerate(ranks):
        assert info["RANK"] == str(i) and info["LOCAL_RANK"] == str(i) and info["WORLD_SIZE"] == "2"
        assert info["MASTER_ADDR"] == "127.0.0.1" and info["MASTER_PORT"] == "29123"
        assert info["argv"] == [f"--local_rank={i}", "--foo", "bar"]
    assert [i["affinity"] for i in ranks] == _expected_affinity(2)


@pytest.mark.slow
def test_launch_multinode_ranks(child):
    script, out = child
    r = run_bl(["--nnodes=3", "--node_rank=2", "--nproc_per_node=2", "--master_addr=10.0.0.1", str(script)],
               env=_clean_env(TEST_OUT=str(out)))
    assert r.returncode == 0, r.stderr
    ranks = _read_ranks(out, 2)
    assert [(i["RANK"], i["WORLD_SIZE"], i["MASTER_ADDR"]) for i in ranks] == [
        ("4", "6", "10.0.0.1"), ("5", "6", "10.0.0.1")]


@pytest.mark.slow
def test_fallback_when_numactl_missing(child, tmp_path):
    script, out = child
    empty = tmp_path / "emptybin"
    empty.mkdir()
    r = run_bl(["--nproc_per_node=2", str(script)], env=_clean_env(TEST_OUT=str(out), PATH=str(empty)))
    assert r.returncode == 0, r.stderr
    assert "numactl not found" in r.stderr and "sched_setaffinity" in r.stderr
    assert [i["affinity"] for i in _read_ranks(out, 2)] == _expected_affinity(2)


@pytest.mark.slow
def test_fallback_when_membind_refused(child, tmp_path):
    script, out = child
    _fake_numactl(tmp_path / "fakebin", refuse="membind")
    env = _clean_env(TEST_OUT=str(out), PATH=f"{tmp_path / 'fakebin'}:{os.environ['PATH']}")
    r = run_bl(["--nproc_per_node=2", str(script)], env=env)
    assert r.returncode == 0, r.stderr
    assert "--membind=0 refused" in r.stderr and "binding cpus only" in r.stderr
    assert [i["affinity"] for i in _read_ranks(out, 2)] == _expected_affinity(2)


@pytest.mark.slow
def test_fallback_when_numactl_refuses_everything(child, tmp_path):
    script, out = child
    _fake_numactl(tmp_path / "fakebin", refuse="all")
    env = _clean_env(TEST_OUT=str(out), PATH=f"{tmp_path / 'fakebin'}:{os.environ['PATH']}")
    r = run_bl(["--nproc_per_node=2", str(script)], env=env)
    assert r.returncode == 0, r.stderr
    assert "numactl refused" in r.stderr and "os.sched_setaffinity" in r.stderr
    assert [i["affinity"] for i in _read_ranks(out, 2)] == _expected_affinity(2)


@pytest.mark.slow
def test_planned_cpus_outside_allowed_set_do_not_kill_the_job(child):
    script, out = child
    # DGX-1 shape on this small machine: most planned cpus do not exist; must still run
    r = run_bl(["--nproc_per_node=2", "--nsockets_per_node=2", "--ncores_per_socket=20", str(script)],
               env=_clean_env(TEST_OUT=str(out)))
    assert r.returncode == 0, r.stderr
    assert len(_read_ranks(out, 2)) == 2


def _alive(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in f)
    except OSError:
        return False


@pytest.mark.slow
def test_child_failure_propagates_and_stops_siblings(child):
    script, out = child
    t0 = time.monotonic()
    r = run_bl(["--nproc_per_node=3", "--binding=none", str(script)],
               env=_clean_env(TEST_OUT=str(out), CHILD_MODE="fail"), timeout=60)
    assert r.returncode == 7, r.stderr
    assert time.monotonic() - t0 < 15
    assert "local rank 1 exited with code 7" in r.stderr
    for i in (0, 2):
        assert (out / f"term{i}").exists()  # siblings got SIGTERM
        assert not _alive(_read_ranks(out, 3)[i]["pid"])


@pytest.mark.slow
def test_a_failed_rank_takes_the_processes_it_left_with_it(child):
    """A rank that died left its own children (its background scorer, say) running: the launcher stopped only the
    process groups of the ranks still alive. It now stops the dead rank's group too."""
    script, out = child
    r = run_bl(["--nproc_per_node=2", "--binding=none", str(script)],
               env=_clean_env(TEST_OUT=str(out), CHILD_MODE="fail_leaving_a_child"), timeout=60)
    assert r.returncode == 7, r.stderr
    helper = int((out / "helper.pid").read_text())
    for _ in range(50):
        if not _alive(helper):
            break
        time.sleep(0.1)
    else:
        os.kill(helper, signal.SIGKILL)
        raise AssertionError("the failed rank's child outlived the launcher")


@pytest.mark.slow
def test_not_converged_is_an_outcome_not_a_crash(child):
    """Exit code 3 (the trainer's "not converged", every rank together): the other ranks are not terminated as
    after a crash, and the launcher says what it means."""
    script, out = child
    r = run_bl(["--nproc_per_node=3", "--binding=none", str(script)],
               env=_clean_env(TEST_OUT=str(out), CHILD_MODE="not_converged"), timeout=60)
    assert r.returncode == 3, r.stderr
    assert "WARNING" not in r.stderr and "terminating" not in r.stderr
    assert "without reaching its quality target (exit code 3: not converged, an outcome, not a crash)" in r.stderr
    assert not any((out / f"term{i}").exists() for i in range(3))  # nobody was sent SIGTERM


def test_not_converged_code_is_the_trainers():
    from maskrcnn_benchmark.cli.exit_codes import BAD_INPUT, NOT_CONVERGED

    assert bl.NOT_CONVERGED == NOT_CONVERGED.code and bl.BAD_INPUT == BAD_INPUT.code


@pytest.mark.slow
@pytest.mark.parametrize("args,culprit", [(["--nproc_per_node", "1", "tools/nope.py"], "tools/nope.py"),
                                          (["--nproc_per_node", "zero", "x.py"], "zero"),
                                          (["--nproc_per_node", "0", "x.py"], "--nproc_per_node")])
def test_a_refused_command_line_is_one_line_and_starts_nothing(args, culprit):
    """A missing training script started every rank anyway (each printed python's error, and bind_launch exited 2,
    the code of a diverged run); a bad option printed argparse's usage block of 12 lines."""
    r = run_bl(args)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m bind_launch: error: ") and culprit in lines[0], lines
    assert "starting local_rank" not in r.stdout + r.stderr


def test_more_ranks_than_cores_warns_once(capsys):
    plan = bl.plan_bindings(8, 1, 2)  # 8 ranks, one socket of 2 cores: shared round-robin
    assert bl.warn_if_oversubscribed(plan, "auto") is True
    err = capsys.readouterr().err
    assert err.count("WARNING") == 1 and "8 ranks on this node but only 2 core(s) can be pinned" in err
    assert bl.warn_if_oversubscribed(bl.plan_bindings(2, 1, 2), "auto") is False
    assert bl.warn_if_oversubscribed(plan, "none") is False


@pytest.mark.slow
def test_child_killed_siblings_terminated(child):
    script, out = child
    t0 = time.monotonic()
    r = run_bl(["--nproc_per_node=3", str(script)],
               env=_clean_env(TEST_OUT=str(out), CHILD_MODE="kill", EXIT0_ON_TERM="1"), timeout=60)
    elapsed = time.monotonic() - t0
    assert r.returncode == 128 + signal.SIGKILL, r.stderr
    assert elapsed < 15, elapsed
    infos = _read_ranks(out, 3)
    assert all(not _alive(i["pid"]) for i in infos)


@pytest.mark.slow
def test_stubborn_child_is_sigkilled(child, tmp_path):
    stubborn = tmp_path / "stubborn.py"
    stubborn.write_text(textwrap.dedent("""
        import os, signal, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        lr = sys.argv[1].split("=")[1]
        open(os.path.join(os.environ["TEST_OUT"], f"pid{lr}"), "w").write(str(os.getpid()))
        if lr == "1":
            time.sleep(0.5); sys.exit(5)
        time.sleep(120)
    """))
    _script, out = child
    t0 = time.monotonic()
    r = run_bl(["--nproc_per_node=2", "--kill_timeout=1", "--binding=none", str(stubborn)],
               env=_clean_env(TEST_OUT=str(out)))
    assert r.returncode == 5
    assert time.monotonic() - t0 < 10
    assert not _alive(int((out / "pid0").read_text()))


def _sleeping_ranks(child, **popen):
    """bind_launch with 2 ranks of the CHILD script that sleep, once both have started."""
    script, out = child
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, **popen}
    p = subprocess.Popen([sys.executable, "-m", "bind_launch", "--nproc_per_node=2", "--binding=none", str(script)],
                         cwd=ROOT, env=_clean_env(TEST_OUT=str(out), CHILD_MODE="sleep"), **popen)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all((out / f"rank{i}.json").exists() for i in range(2)):
        time.sleep(0.1)
    return p, out


@pytest.mark.slow
def test_signals_are_forwarded(child):
    p, out = _sleeping_ranks(child)
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=30)
    assert rc == 128 + signal.SIGTERM
    for i in range(2):
        assert (out / f"term{i}").read_text() == str(int(signal.SIGTERM))


@pytest.mark.slow
def test_slurms_warning_signal_stops_the_launcher_as_it_stops_the_ranks(child):
    """A Slurm ``--signal=USR1@120`` warning: the trainer takes SIGUSR1 as a stop (exit 138). The launcher
    forwarded it but did not take it as one: the ranks' 138 was "local rank 0 exited with code 138" (a crash), and
    one that came while the ranks were being started let the rest start after it, never signalled."""
    p, out = _sleeping_ranks(child)
    p.send_signal(signal.SIGUSR1)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 128 + signal.SIGUSR1, err
    assert f"received signal {int(signal.SIGUSR1)}; stopping the children" in err and "exited with code" not in err


@pytest.mark.slow
def test_a_hangup_ignored_at_start_stays_ignored(child):
    """``nohup ./run_and_time.sh &`` on a node, then the ssh session ends: the shell's SIGHUP reaches the job's
    process group, the launcher with it. bind_launch replaced nohup's SIG_IGN with its forwarding handler and
    stopped the run (129); a hangup ignored when it started stays ignored, and the ranks run on."""
    p, out = _sleeping_ranks(child, preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    try:
        p.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert p.poll() is None and not any((out / f"term{i}").exists() for i in range(2))
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.mark.slow
def test_a_stop_after_the_terminal_is_gone_still_stops_the_ranks_in_order(child):
    """``./run_and_time.sh 2>&1 | tee log`` and Ctrl-C: tee is gone before the launcher reports the signal, its
    line raised BrokenPipeError out of main (exit 1, the code of bad input) and the ranks' parent-death signal
    SIGKILLed them in their cleanup. The launcher's own lines are best effort; it stops the ranks and exits 143."""
    p, out = _sleeping_ranks(child, stdout=subprocess.DEVNULL, text=False)
    try:
        p.stderr.close()  # the reader is gone
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 128 + signal.SIGTERM
        assert all((out / f"term{i}").exists() for i in range(2))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_the_children_number_the_gpus_in_the_plans_order_whatever_the_environment_says(monkeypatch):
    """The plan binds local rank i beside GPU i in PCI bus order; CUDA numbers the GPUs that way only with
    CUDA_DEVICE_ORDER=PCI_BUS_ID. A FASTEST_FIRST in the environment (CUDA's own default, spelled out in some
    site profiles) was kept, so CUDA's device i could be another GPU than the plan's."""
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    args = bl.parse_args(["--nproc_per_node=2", "train.py"])
    assert [bl.child_env(args, i)["CUDA_DEVICE_ORDER"] for i in range(2)] == ["PCI_BUS_ID", "PCI_BUS_ID"]


def test_a_missing_numactl_is_reported_once_not_once_per_rank(monkeypatch, capsys):
    monkeypatch.setattr(bl.shutil, "which", lambda name: None)
    monkeypatch.setattr(bl, "_warned", set())
    plan = bl.plan_bindings(2, 1, 2)
    assert [bl.resolve_binding(b, "auto", membind=False)[0] for b in plan] == ["affinity", "affinity"]
    assert capsys.readouterr().err.count("numactl not found") == 1


def test_nvidias_forced_plan_binds_memory_to_the_node_of_its_cores(tmp_path):
    """DGXNSOCKET=2 DGXSOCKETCORES=64 (config_DGXA100.sh's way to force NVIDIA's arithmetic plan) on an NPS4
    machine (8 NUMA nodes, 4 per socket): NVIDIA's plan binds memory to the socket's number, which names a NUMA
    node only with one node per socket; there rank 4's cores 64-79 (node 4) had node 1's memory, on the other
    socket. The memory is the node that holds the rank's cores."""
    import argparse
    _fake_sysfs(tmp_path, _dgx_cpus(2, 64, 2, nodes_per_socket=4))
    topo = bl.detect_topology(str(tmp_path), env={})
    args = argparse.Namespace(explicit_shape=True, nproc_per_node=8, nsockets_per_node=2, ncores_per_socket=64,
                              no_hyperthreads=False, no_membind=False, topology=topo)
    plan = bl.make_plan(args)
    assert fmt(plan[4]) == ("64-79,192-207", 4)
    assert [b.mem_node for b in plan] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert [b.socket for b in plan] == [0, 0, 0, 0, 1, 1, 1, 1]
    # one node per socket: the socket's number, as NVIDIA's
    _fake_sysfs(tmp_path / "dgx1", _dgx_cpus(2, 20, 2))
    args.topology, args.nsockets_per_node, args.ncores_per_socket = \
        bl.detect_topology(str(tmp_path / "dgx1"), env={}), 2, 20
    assert [b.mem_node for b in bl.make_plan(args)] == [0, 0, 0, 0, 1, 1, 1, 1]
    args.no_membind = True
    assert {b.mem_node for b in bl.make_plan(args)} == {None}


def test_ranks_whose_gpu_node_is_known_keep_it_when_another_gpus_is_not(tmp_path, capsys):
    """GPU 0 on node 1, GPU 1's firmware says -1: the whole plan fell back to spreading in order, with no word,
    and rank 0 ran on node 0, away from its GPU. The known placement is kept, the unknown rank takes the next
    node in order, and a warning names the GPU."""
    _fake_sysfs(tmp_path, _dgx_cpus(2, 4, 1), [("0000:01:00.0", 1), ("0000:02:00.0", -1)])
    topo = bl.detect_topology(str(tmp_path), env={})
    assert topo.gpu_numa == [1, None]
    plan = bl.plan_from_topology(2, topo)
    assert [b.mem_node for b in plan] == [1, 0]
    err = capsys.readouterr().err
    assert "local rank 1" in err and "NUMA node" in err
    # none known (a VM, a single-node board): spread in order, as before, without a warning
    topo.gpu_numa = [None, None]
    assert [b.mem_node for b in bl.plan_from_topology(2, topo)] == [0, 1]
    assert capsys.readouterr().err == ""


def test_without_nvidia_smi_the_jobs_gpus_are_read_from_slurm(tmp_path, monkeypatch, capsys):
    """Without a working nvidia-smi (a container without the driver's utility files) the GPUs were every device
    bound to the nvidia driver: the node's 8, not the job's 4, and NVSwitch bridges among them. A job holding
    GPUs 4-7 (socket 1) under ConstrainDevices (CUDA_VISIBLE_DEVICES 0-3, relative to the job) had every rank
    bound to socket 0's GPUs 0-3. Slurm's SLURM_STEP_GPUS (else SLURM_JOB_GPUS) names the job's GPUs; devices that
    are not display controllers (PCI class 0x03) are not GPUs."""
    monkeypatch.setattr(bl.shutil, "which", lambda name: None)  # no nvidia-smi
    gpus = [(f"0000:{bus:02x}:00.0", 0 if i < 4 else 1) for i, bus in enumerate((0x07, 0x0f, 0x47, 0x4e, 0x87,
                                                                               0x90, 0xb7, 0xbd))]
    _fake_sysfs(tmp_path, _dgx_cpus(2, 8, 1), gpus + [("0000:0a:00.0", 0)])
    for bus, _ in gpus:
        (tmp_path / "bus/pci/devices" / bus / "class").write_text("0x030200\n")
    (tmp_path / "bus/pci/devices/0000:0a:00.0/class").write_text("0x068000\n")  # an NVSwitch: a bridge
    env = {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "SLURM_STEP_GPUS": "4,5,6,7", "SLURM_JOB_GPUS": "4,5,6,7"}
    assert bl.gpu_numa_nodes(str(tmp_path), env) == [1, 1, 1, 1]
    # without the cgroup constraint Slurm gives the global indices: the same GPUs
    env["CUDA_VISIBLE_DEVICES"] = "4,5,6,7"
    assert bl.gpu_numa_nodes(str(tmp_path), env) == [1, 1, 1, 1]
    # a user narrowing within the job (local index 1: the job's second GPU, 5)
    env["CUDA_VISIBLE_DEVICES"] = "1"
    assert bl.gpu_numa_nodes(str(tmp_path), dict(env, SLURM_STEP_GPUS="0,5")) == [1]
    # "1" of a job on GPUs 1 and 5 names GPU 1, or the job's second GPU under ConstrainDevices: said so
    assert bl.gpu_numa_nodes(str(tmp_path), dict(env, SLURM_STEP_GPUS="1,5")) == [0]
    assert "cannot tell" in capsys.readouterr().err
    # outside Slurm: every GPU of the node, the bridge left out
    assert bl.gpu_numa_nodes(str(tmp_path), {}) == [0, 0, 0, 0, 1, 1, 1, 1]


def test_the_default_port_differs_between_slurm_jobs(monkeypatch):
    """Two Slurm jobs sharing a node (non-exclusive, run by hand without MASTER_PORT) both took 29500: one failed
    with EADDRINUSE or its ranks joined the other's store. Without MASTER_PORT the port follows the job id, as the
    Slurm scripts' does (29500 + id % 1000); outside Slurm 29500."""
    for k in ("MASTER_PORT", "SLURM_JOB_ID", "SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_STEP_NUM_NODES"):
        monkeypatch.delenv(k, raising=False)
    assert bl.parse_args(["--binding=none", "x.py"]).master_port == 29500
    monkeypatch.setenv("SLURM_JOB_ID", "1234")
    assert bl.parse_args(["--binding=none", "x.py"]).master_port == 29500 + 234
    monkeypatch.setenv("MASTER_PORT", "31000")
    assert bl.parse_args(["--binding=none", "x.py"]).master_port == 31000


@pytest.mark.parametrize("flag", ["--nsockets_per_node=2", "--ncores_per_socket=64"])
def test_one_of_the_two_shape_flags_alone_is_refused(flag, capsys):
    """Only one of the two (DGXNSOCKET without DGXSOCKETCORES) was dropped without a word and the dry-run plan
    printed the given number as 'detected from sysfs'."""
    with pytest.raises(SystemExit) as e:
        bl.parse_args([flag, "--binding=none", "x.py"])
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert "--nsockets_per_node" in err and "--ncores_per_socket" in err and "both" in err


def test_children_get_one_openmp_thread_unless_told(monkeypatch):
    """Under pyxis (no %environment) or on the hosts nothing set OMP_NUM_THREADS: each of a node's 8 ranks ran
    an OpenMP pool of every core. As torchrun does, several ranks per node get 1 unless the environment says."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    for k in ("MASTER_PORT", "SLURM_JOB_ID", "SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_STEP_NUM_NODES"):
        monkeypatch.delenv(k, raising=False)
    args = bl.parse_args(["--nproc_per_node=2", "--binding=none", "x.py"])
    assert bl.child_env(args, 0)["OMP_NUM_THREADS"] == "1"
    one = bl.parse_args(["--nproc_per_node=1", "--binding=none", "x.py"])
    assert "OMP_NUM_THREADS" not in bl.child_env(one, 0)
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    assert bl.child_env(args, 1)["OMP_NUM_THREADS"] == "7"


def test_a_stop_signal_while_the_ranks_start_starts_no_more_of_them(monkeypatch):
    """Slurm's time limit or scancel while the launcher starts its ranks (each start can wait up to two 20 s
    numactl probes): the signal reached the ranks already running, and the loop went on starting the others,
    which wait() then killed at once."""
    args = bl.parse_args(["--nproc_per_node=4", "--binding=none", "train.py"])
    launcher = bl.Launcher(args, bl.plan_bindings(4, 1, 4))
    started = []

    class Started:  # a rank that has already ended: nothing real to signal
        pid = -1

        def __init__(self, cmd, **_):
            started.append(cmd)
            if len(started) == 1:
                launcher._forward(signal.SIGTERM, None)

        def poll(self):
            return 0

    monkeypatch.setattr(bl.subprocess, "Popen", Started)
    launcher.start()
    assert len(started) == 1 and launcher.stop_signal == signal.SIGTERM


@pytest.mark.slow  # starts processes
def test_the_group_of_a_rank_that_ended_is_signalled_only_while_it_holds_the_launchers_processes(monkeypatch):
    """terminate_all signalled the process group of every rank, ended ones included (their loader workers or
    scorer may be left in it). A rank reaped long before, whose group had emptied, left its number free: Linux
    can give it to a new group leader of the same user, and the launcher's SIGTERM, then SIGKILL, went to that
    unrelated group. A group is signalled only while it holds processes of the launcher's session."""
    import subprocess

    args = bl.parse_args(["--nproc_per_node=2", "--binding=none", "--kill_timeout=1", "train.py"])
    launcher = bl.Launcher(args, bl.plan_bindings(2, 1, 2))
    gone = subprocess.Popen(["true"], preexec_fn=bl._child_setup(None))  # a rank that ended, its group empty
    gone.wait()
    left = subprocess.Popen(["bash", "-c", "sleep 30 & exit 5"], preexec_fn=bl._child_setup(None))
    left.wait()  # a rank that ended and left a process in its group
    launcher.procs = [gone, left]
    signalled, killpg = [], os.killpg
    monkeypatch.setattr(bl.os, "killpg", lambda pgid, sig: (signalled.append(pgid), killpg(pgid, sig)))
    launcher.terminate_all(signal.SIGTERM)
    assert gone.pid not in signalled and left.pid in signalled
    deadline = time.monotonic() + 10  # the left-behind sleep goes with it (its parent, init, reaps it)
    while bl._group_holds_our_processes(left.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not bl._group_holds_our_processes(left.pid)


@pytest.mark.parametrize("codes,expected", [((3, 3), 3), ((0, 0), 0), ((3, -15), 128 + 15), ((2, 2), 128 + 15)])
def test_ranks_that_end_with_their_outcome_after_a_stop_keep_it(monkeypatch, codes, expected):
    """Slurm's time limit signals the launcher too: it returned 128+signal at once, though the ranks, their
    run_stop logged, hold their outcome (the final checkpoint under way) and end with it: a run that did not
    converge counted as stopped (143), and the job's "1 of 5 did not converge" rule never applied. Ranks that all
    end by themselves with an outcome (0, or 3: not converged) give it; anything else is the stop's."""
    args = bl.parse_args(["--nproc_per_node=2", "--binding=none", "train.py"])
    launcher = bl.Launcher(args, bl.plan_bindings(2, 1, 2))

    class Ended:
        def __init__(self, rc):
            self.returncode, self.pid = rc, -1

        def poll(self):
            return self.returncode

        def wait(self):
            return self.returncode

    launcher.procs = [Ended(c) for c in codes]
    monkeypatch.setattr(launcher, "terminate_all", lambda sig: None)
    launcher.stop_signal = signal.SIGTERM
    assert launcher.wait() == expected
