"""The distributed bootstrap's own errors, and the gather to rank 0 (the other collectives are exercised by the multi-rank
runs)."""
import pytest

from maskrcnn_benchmark.cli.exit_codes import BAD_INPUT, describe
from maskrcnn_benchmark.utils import comm
from maskrcnn_benchmark.utils.errors import UserError

GLOO_REFUSED = ("[enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:446] op.preamble.length <= "
                "op.nbytes. Connection refused\nException raised from ... (most recent call first):\nframe #0: ...")


def test_a_gloo_side_group_that_cannot_form_is_one_line_naming_its_setting(monkeypatch):
    """On NCCL runs the trainer's stop decisions go over a gloo group beside NCCL, formed with the process group
    (before run_start: before, it was formed after the clock started, by the first hook). gloo finds its interface
    from the hostname; where that resolves to an address the other nodes cannot reach, forming it fails with a
    C++ message of many lines: one line instead, naming GLOO_SOCKET_IFNAME, exit 1 (a site setting)."""
    def refused(**kwargs):
        assert kwargs["backend"] == "gloo"
        raise RuntimeError(GLOO_REFUSED)

    monkeypatch.setattr(comm.dist, "new_group", refused)
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth9")
    with pytest.raises(UserError) as e:
        comm.gloo_side_group(30)
    code, line = describe(e.value)
    assert code == BAD_INPUT.code and "\n" not in line
    assert "Connection refused" in line and "set GLOO_SOCKET_IFNAME" in line and "GLOO_SOCKET_IFNAME='eth9'" in line


def _gather_rank(rank, world, init_file, out):
    import torch.distributed as dist

    from maskrcnn_benchmark.utils import comm

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        out[rank] = comm.gather({"rank": rank, "payload": "x" * (rank + 1)}, dst=0)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_gather_delivers_to_rank_0_only(tmp_path):
    """The evaluation's gather: rank 0 gets every rank's object in rank order, the others nothing."""
    import torch.multiprocessing as mp

    out = mp.Manager().dict()
    mp.spawn(_gather_rank, args=(3, str(tmp_path / "init"), out), nprocs=3)
    assert out[0] == [{"rank": r, "payload": "x" * (r + 1)} for r in range(3)]
    assert out[1] is None and out[2] is None


def test_ranks_on_several_nodes_without_master_addr_are_one_line(monkeypatch):
    """Started by srun without bind_launch (SLURM_PROCID / SLURM_NTASKS), processes on several nodes and no
    MASTER_ADDR: each node met at its own 127.0.0.1, and every rank timed out later with an internal error. One
    line naming MASTER_ADDR instead, before any process group."""
    for key in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SLURM_NTASKS", "8")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "8")  # an srun step's
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "4(x2)")
    monkeypatch.setenv("SLURM_PROCID", "0")

    def no_group(*args, **kwargs):
        raise AssertionError("a process group was formed")

    monkeypatch.setattr(comm.dist, "init_process_group", no_group)
    with pytest.raises(UserError) as e:
        comm.init_distributed(device="cpu", timeout_s=1)
    code, line = describe(e.value)
    assert code == BAD_INPUT.code and "\n" not in line
    assert "MASTER_ADDR" in line and "8 processes" in line and "4 per node" in line


def test_a_process_started_in_an_allocations_shell_is_alone(monkeypatch):
    """python tools/train_mlperf.py typed in an salloc shell (or an sbatch script) with --ntasks-per-node=2: the
    allocation's SLURM_NTASKS was taken for the world size, rank 0 waited DISTRIBUTED_TIMEOUT for a peer nobody
    started and ended as an internal error. Slurm's task variables count only inside an srun step
    (SLURM_STEP_NUM_TASKS); outside one the process is alone."""
    for key in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE", "LOCAL_RANK",
                "SLURM_STEP_NUM_TASKS", "SLURM_STEP_ID"):
        monkeypatch.delenv(key, raising=False)
    for key, value in (("SLURM_JOB_ID", "123"), ("SLURM_NTASKS", "2"), ("SLURM_NTASKS_PER_NODE", "2"),
                       ("SLURM_PROCID", "0"), ("SLURM_LOCALID", "0")):
        monkeypatch.setenv(key, value)

    def no_group(*args, **kwargs):
        raise AssertionError("a process group was formed")

    monkeypatch.setattr(comm.dist, "init_process_group", no_group)
    assert comm.launch_sizes() == (1, 1) and comm.launch_rank() == 0
    assert comm.init_distributed(device="cpu", timeout_s=1)[:3] == (0, 1, 0)


def test_a_world_size_left_in_the_environment_without_a_rank_is_one_line(monkeypatch):
    """``export WORLD_SIZE=8`` (check_recipe and preflight take their --world-size from it), then the trainer typed
    by hand: it ran as rank 0 of 8 (RANK unset reads 0), claimed the output folder, logged init_start and waited
    DISTRIBUTED_TIMEOUT (300 s) for seven peers nobody started, to end as an internal error. Every launcher that
    sets WORLD_SIZE sets RANK too (bind_launch, torchrun; srun: SLURM_PROCID)."""
    for key in ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_WORLD_SIZE", "LOCAL_RANK", "SLURM_STEP_NUM_TASKS",
                "SLURM_PROCID"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "8")
    with pytest.raises(UserError) as e:
        comm.launch_sizes()
    code, line = describe(e.value)
    assert code == BAD_INPUT.code and "\n" not in line and line.startswith("WORLD_SIZE=8 "), line
    monkeypatch.setenv("RANK", "3")  # a launcher's process
    assert comm.launch_sizes() == (8, 1)


def test_the_heartbeat_thread_has_ended_when_the_process_group_is_torn_down():
    """The heartbeat thread was told to stop and left running: a rank that exited while it was inside a store call
    (its host, rank 0, still writing the final checkpoint under load) was aborted at interpreter exit ('terminate
    called without an active exception', SIGABRT: a daemon thread unwound through C++), and torchrun failed the
    run that had succeeded."""
    import datetime
    import socket

    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    host = dist.TCPStore("127.0.0.1", port, 2, is_master=True, timeout=datetime.timedelta(seconds=30),
                         wait_for_workers=False)
    hb = comm._Heartbeat("127.0.0.1", port, 1, 2, 30)
    assert hb._thread.is_alive()
    hb.stop()
    assert not hb._thread.is_alive()
    del host


@pytest.mark.slow  # a process hosts the store
def test_a_frozen_store_host_is_named_within_seconds_not_a_timeout_per_rank(tmp_path):
    """The diagnosis of a failed collective asks the rendezvous store (on rank 0) for each rank's heartbeat, one
    by one: with rank 0 frozen (SIGSTOP, a hung node) each question waited DISTRIBUTED_TIMEOUT, 32 ranks x 300 s
    = 2.7 hours before the error line. A store host that has not answered this rank's own heartbeat for a few
    periods is named without asking."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import threading
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    host = subprocess.Popen([sys.executable, "-c", (
        "import datetime, time, torch.distributed as dist\n"
        f"s = dist.TCPStore('127.0.0.1', {port}, None, is_master=True, timeout=datetime.timedelta(seconds=60), "
        "wait_for_workers=False)\n"
        "print('up', flush=True)\n"
        "time.sleep(120)\n")], stdout=subprocess.PIPE, text=True)
    hb = None
    try:
        assert host.stdout.readline().strip() == "up"
        hb = comm._Heartbeat("127.0.0.1", port, 1, 32, 300)
        time.sleep(0.5)
        assert all(v is not None for v in hb.counters().values())  # answered while the host runs
        os.kill(host.pid, signal.SIGSTOP)
        time.sleep(comm.STALE_S + 1)  # a collective fails DISTRIBUTED_TIMEOUT after the freeze: longer than this
        found, t0 = [], time.monotonic()
        asking = threading.Thread(target=lambda: found.append(hb.counters()), daemon=True)
        asking.start()
        asking.join(60)
        assert found and all(v is None for v in found[0].values()), "still asking after 60 s"
        assert time.monotonic() - t0 < 5
    finally:
        os.kill(host.pid, signal.SIGCONT)
        host.kill()
        host.wait()
        if hb is not None:
            hb.stop()  # its store call fails with the host gone: no thread left inside C++ at exit


@pytest.mark.parametrize("name", ["RANK", "WORLD_SIZE", "LOCAL_RANK"])
def test_a_launch_variable_that_is_not_a_number_is_one_line_naming_it(monkeypatch, name):
    """RANK=1x (a script's typo) was an internal error, 'invalid literal for int()', naming no variable."""
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_STEP_NUM_TASKS"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv(name, "1x")
    with pytest.raises(UserError) as e:
        comm.launch_rank(), comm.launch_sizes(), comm.init_distributed(device="cpu", timeout_s=1)
    code, line = describe(e.value)
    assert code == BAD_INPUT.code and line.startswith(f"{name}='1x' (from the environment) is not a whole number")
