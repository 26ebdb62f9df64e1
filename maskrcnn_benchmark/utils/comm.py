"""The distributed bootstrap and collectives, in one place.

Processes are started by bind_launch/torchrun/srun with ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT`` in the environment (inside an srun step, Slurm's ``SLURM_PROCID``/
``SLURM_STEP_NUM_TASKS``/``SLURM_LOCALID`` are used when those are missing; an allocation's shell is one process). The device is pinned before ``init_process_group`` (NCCL needs it), the
backend is NCCL on GPU and gloo on CPU, and a barrier ends the setup so a rank that cannot join fails early.

Every collective gives up after ``timeout_s`` (the config's DISTRIBUTED_TIMEOUT). Each rank also beats a heartbeat
into the rendezvous store from a background thread, so that when a collective fails the surviving ranks can say
which rank stopped answering (:func:`unresponsive_ranks`).
"""
import datetime
import logging
import os
import threading
import time

import torch
import torch.distributed as dist

from .errors import NoGPU, RankLost, UserError

logger = logging.getLogger(__name__)


def _env_int(*names, default=None):
    for n in names:
        if os.environ.get(n, "").strip():
            try:
                return int(os.environ[n])
            except ValueError:
                raise UserError(f"{n}={os.environ[n]!r} (from the environment) is not a whole number: the launcher "
                                "sets it (bind_launch, torchrun, srun); unset it, or fix its value") from None
    return default


HEARTBEAT_PERIOD_S = 2.0
# The store host (rank 0) has not answered this rank's heartbeat for this long: frozen (SIGSTOP, a hung node) or
# gone. The diagnosis of a failed collective then names it without asking: each question would wait
# DISTRIBUTED_TIMEOUT (a new connection too: the client's handshake waits on a frozen host whatever its timeout)
STALE_S = 3 * HEARTBEAT_PERIOD_S
_state = {"timeout": None, "heartbeat": None, "side_group": None}


class _Heartbeat:
    """A counter per rank in the rendezvous store, advanced every HEARTBEAT_PERIOD_S by a daemon thread on its
    own store connection (it keeps beating while the main thread waits in a collective)."""

    def __init__(self, host, port, rank, world, timeout_s):
        self.rank, self.world = rank, world
        self.answered = time.monotonic()  # the store host's last answer to this rank's heartbeat
        self.store = dist.TCPStore(host, port, None, is_master=False, timeout=datetime.timedelta(seconds=timeout_s),
                                   wait_for_workers=False)
        self.prefix = f"maskrcnn_heartbeat/{os.environ.get('MASTER_PORT', '')}/"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
        self._thread.start()

    def _beat(self):
        key = f"{self.prefix}{self.rank}"
        failures = 0
        while not self._stop.is_set() and failures < 3:
            try:
                self.store.add(key, 1)
                self.answered = time.monotonic()
                failures = 0
            except Exception:  # noqa: BLE001 - one failed call is retried (a thread that stopped at the first made
                failures += 1  # this healthy rank look like the one that stopped); three: the store host is gone
            self._stop.wait(HEARTBEAT_PERIOD_S)

    def counters(self):
        """Every rank's counter; all ``None`` when the store host does not answer (this rank's own heartbeat
        has had no answer for STALE_S, or a question fails)."""
        gone = {r: None for r in range(self.world)}
        if time.monotonic() - self.answered > STALE_S:
            return gone
        out = {}
        for r in range(self.world):
            try:
                out[r] = self.store.add(f"{self.prefix}{r}", 0)
            except Exception:  # noqa: BLE001 - it stopped answering: asking the next rank would wait again
                return gone
        return out

    def stop(self):
        """Stop beating and wait for the thread to end: a daemon thread still inside a store call (C++) when the
        interpreter exits is unwound through C++ and aborts the process (SIGABRT), after a run that succeeded. A
        store call returns within its timeout; a thread still in one after 10 s is left (the host is gone)."""
        self._stop.set()
        self._thread.join(10.0)


def unresponsive_ranks(wait_s=None):
    """Ranks whose heartbeat did not advance over ``wait_s`` (default: 3 periods); ``[0]`` when the store host
    (rank 0) itself is gone; ``None`` when unknown (single process, no heartbeat)."""
    hb = _state["heartbeat"]
    if hb is None:
        return None
    before = hb.counters()
    if all(v is None for v in before.values()):
        return [0]
    time.sleep(wait_s if wait_s is not None else 3 * HEARTBEAT_PERIOD_S)
    after = hb.counters()
    return [r for r in range(hb.world) if r != hb.rank and (after.get(r) is None or after[r] == before.get(r))]


def collective_timeout():
    return _state["timeout"]


def is_collective_failure(exc):
    dist_error = getattr(dist, "DistBackendError", ())
    if dist_error and isinstance(exc, dist_error):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(
        k in text for k in ("Timed out", "timed out", "Connection closed by peer", "Connection reset by peer",
                            "gloo", "NCCL", "Socket Timeout"))


def as_rank_lost(exc):
    """:class:`RankLost` naming the rank whose heartbeat stopped, for a failed collective (call it before the
    process group is destroyed); ``None`` for any other error."""
    if get_world_size() <= 1 or isinstance(exc, RankLost) or not is_collective_failure(exc):
        return None
    timeout = collective_timeout()
    stalled = unresponsive_ranks()
    who = ("rank " + ", ".join(map(str, stalled)) + " stopped answering (no heartbeat)") if stalled else \
        "another rank stopped answering"
    limit = f" (DISTRIBUTED_TIMEOUT {timeout:g} s)" if timeout else ""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return RankLost(f"{who}; a collective on rank {get_rank()} failed{limit}: {first}")


def _slurm(name):
    """A Slurm task variable, only inside an srun step (which sets SLURM_STEP_NUM_TASKS): an allocation's shell
    (salloc, an sbatch script) has SLURM_NTASKS too, for tasks it never started."""
    return name if os.environ.get("SLURM_STEP_NUM_TASKS", "").strip() else "_NOT_IN_AN_SRUN_STEP"


def launch_rank():
    """This process's global rank as the launcher set it (bind_launch: RANK; srun: SLURM_PROCID), before the
    process group exists (what the logs of each rank are named after)."""
    return _env_int("RANK", _slurm("SLURM_PROCID"), default=0)


def launch_sizes():
    """``(world size, processes on this node)`` as the launcher set them (bind_launch: WORLD_SIZE and
    LOCAL_WORLD_SIZE; srun: SLURM_STEP_NUM_TASKS and SLURM_NTASKS_PER_NODE), before the process group exists."""
    world = _env_int("WORLD_SIZE", _slurm("SLURM_STEP_NUM_TASKS"), default=1)
    if world > 1 and not any(os.environ.get(n, "").strip() for n in ("RANK", _slurm("SLURM_PROCID"))):
        # every launcher that sets the world size sets the rank too: a WORLD_SIZE left in a shell would have this
        # process wait DISTRIBUTED_TIMEOUT for peers nobody started
        raise UserError(f"WORLD_SIZE={world} is set but RANK is not: this process was not started by a launcher "
                        "(it would wait for peers nobody started); unset WORLD_SIZE for one process, or start the "
                        "processes with python -m bind_launch (or torchrun)")
    per_node = os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get(_slurm("SLURM_NTASKS_PER_NODE"), "")
    per_node = per_node.split("(")[0]
    return world, int(per_node) if per_node.strip().isdigit() else 1


def launch_nodes():
    """The nodes of the run: bind_launch's processes over those on one node (WORLD_SIZE, LOCAL_WORLD_SIZE); under
    srun alone the step's nodes (SLURM_STEP_NUM_NODES: its tasks per node need not be given)."""
    world, per_node = launch_sizes()
    if not os.environ.get("LOCAL_WORLD_SIZE", "").strip().isdigit():
        step_nodes = os.environ.get(_slurm("SLURM_STEP_NUM_NODES"), "").strip()
        if step_nodes.isdigit():
            return max(1, int(step_nodes))
    return max(1, -(-world // max(per_node, 1)))


def init_distributed(local_rank=None, device="cuda", timeout_s=300, side_group=False):
    """Initialise torch.distributed from the environment; returns ``(rank, world_size, local_rank, device)``.
    ``side_group`` (a training run): with NCCL, also the gloo group :class:`AsyncFlag` uses
    (:func:`gloo_side_group`), formed now, before the run's clock starts."""
    world = launch_sizes()[0]
    rank = launch_rank()
    if local_rank is None or local_rank < 0:
        local_rank = _env_int("LOCAL_RANK", _slurm("SLURM_LOCALID"), default=0)
    use_cuda = device == "cuda"
    if use_cuda and not torch.cuda.is_available():
        raise NoGPU("MODEL.DEVICE is cuda but no GPU is visible: set MODEL.DEVICE cpu for a CPU run")
    dev = torch.device("cuda", local_rank % max(torch.cuda.device_count(), 1)) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(dev)
    if world > 1 and not dist.is_initialized():
        per_node = launch_sizes()[1]
        known = os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get(_slurm("SLURM_NTASKS_PER_NODE"))
        if known and world > per_node and not os.environ.get("MASTER_ADDR"):  # each node: its own loopback
            raise UserError(f"{world} processes, {per_node} per node, and MASTER_ADDR is not set: set it to the first "
                            "node of the job (scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1), or start "
                            "the processes with python -m bind_launch, which sets it")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
        dist.init_process_group(backend="nccl" if use_cuda else "gloo", init_method="env://", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=timeout_s))
        _state["timeout"] = timeout_s
        synchronize()
        if use_cuda and side_group:
            _state["side_group"] = gloo_side_group(timeout_s)
        try:
            _state["heartbeat"] = _Heartbeat(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), rank, world,
                                             timeout_s)
        except Exception as e:  # noqa: BLE001 - diagnostics only: training works without it
            logger.warning("no heartbeat (a stalled rank will not be named): %s", str(e).splitlines()[0])
    return rank, world, local_rank, dev


def gloo_side_group(timeout_s):
    """The gloo group beside NCCL that :class:`AsyncFlag` all-reduces its small CPU tensors over, formed with the
    process group (before ``init_stop`` and ``run_start``): gloo finds its interface from the hostname unless
    ``GLOO_SOCKET_IFNAME`` names one, so on a node whose hostname resolves to an address the others cannot reach
    the run fails here, in one line naming the setting, before its clock starts."""
    try:
        return dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))
    except Exception as e:  # noqa: BLE001 - gloo's own error is a C++ enforce message of several lines
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"the gloo group beside NCCL could not be formed ({first}); set GLOO_SOCKET_IFNAME to the "
                        "network interface the nodes reach each other on (as NCCL_SOCKET_IFNAME), GLOO_SOCKET_IFNAME="
                        f"'{os.environ.get('GLOO_SOCKET_IFNAME', '')}'") from None


def get_world_size():
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def get_rank():
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def is_main_process():
    return get_rank() == 0


def synchronize():
    if get_world_size() > 1:
        if dist.get_backend() == "nccl":
            dist.barrier(device_ids=[torch.cuda.current_device()])
        else:
            dist.barrier()


def all_gather(data):
    """Gather a picklable object from every rank (list indexed by rank)."""
    if get_world_size() == 1:
        return [data]
    out = [None] * get_world_size()
    dist.all_gather_object(out, data)
    return out


def gather(data, dst=0):
    """A picklable object from every rank on ``dst`` (list indexed by rank; None on the other ranks, which neither
    receive nor unpickle the others' objects). A collective: every rank calls it."""
    if get_world_size() == 1:
        return [data]
    out = [None] * get_world_size() if get_rank() == dst else None
    dist.gather_object(data, out, dst=dst)
    return out


def broadcast_object(obj, src=0):
    if get_world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def reduce_dict(values, average=True):
    """Sum (or mean) a dict of scalar tensors over ranks, for logging."""
    if get_world_size() == 1:
        return values
    keys = sorted(values)
    stacked = torch.stack([values[k].detach().float() for k in keys])
    dist.all_reduce(stacked)
    if average:
        stacked /= get_world_size()
    return dict(zip(keys, stacked))


class AsyncFlag:
    """Agree on a small integer across ranks (the maximum) without waiting for it.

    ``exchange(value)`` posts this rank's value in an asynchronous all-reduce and returns the result of the
    previous post, so a decision one rank takes at iteration i is known to every rank at iteration i + 1, and no
    iteration blocks on a collective. The all-reduce runs on a gloo group (the default group when it is gloo, a
    separate one beside NCCL), on CPU tensors: no GPU synchronization. ``agree(value)`` is the blocking form.
    """

    def __init__(self):
        self.world = get_world_size()
        self.group = None
        if self.world > 1:
            timeout = datetime.timedelta(seconds=_state["timeout"] or 300)
            # the side group init_distributed formed (a process group made elsewhere, as in tests: formed here)
            self.group = dist.group.WORLD if dist.get_backend() == "gloo" else \
                _state.get("side_group") or gloo_side_group(timeout.total_seconds())
        self._work = None
        self._buf = None

    def _result(self):
        """The result of the post in flight (waits for it), or None when nothing was posted."""
        if self._work is None:
            return None
        self._work.wait()
        self._work = None
        return int(self._buf.item())

    def exchange(self, value):
        """Post ``value``; return the agreed value of the previous post (None if there was none)."""
        if self.world == 1:
            return int(value)
        previous = self._result()
        self._buf = torch.tensor([int(value)], dtype=torch.int64)
        self._work = dist.all_reduce(self._buf, op=dist.ReduceOp.MAX, group=self.group, async_op=True)
        return previous

    def agree(self, value):
        """Blocking: the maximum of every rank's value (and of any pending post)."""
        if self.world == 1:
            return int(value)
        pending = self._result()
        buf = torch.tensor([max(int(value), pending or 0)], dtype=torch.int64)
        dist.all_reduce(buf, op=dist.ReduceOp.MAX, group=self.group)
        return int(buf.item())

    def close(self):
        self._result()


def destroy():
    if _state["heartbeat"] is not None:
        _state["heartbeat"].stop()
        _state["heartbeat"] = None
    _state["side_group"] = None  # destroyed with the process group
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


__all__ = ["init_distributed", "get_rank", "get_world_size", "is_main_process", "synchronize", "all_gather",
           "broadcast_object", "reduce_dict", "AsyncFlag", "gloo_side_group", "unresponsive_ranks",
           "collective_timeout", "destroy", "RankLost", "as_rank_lost"]
