#!/usr/bin/env python3
"""Submit MLPerf Mask R-CNN runs to Slurm from Python (submitit), wait, and collect the logs.

    python tools/submit.py --system DGXH100_4x8x4 --image singularity/maskrcnn.sif --partition gpu \
        --data /scratch/coco --weights-dir /scratch/models --nexp 5 --results results/4node

Each run is one Slurm job of ``--nodes`` nodes, one task per node, exclusive, ``--gpus-per-node`` GPUs; every
node runs ``run_and_time.sh`` in the image the way the batch scripts run it (``slurm/in_container.sh``: clean
environment, the checkout bound over the image's copy, /data and /coco/models read-only, /results), or on the
host with ``--image none``, so ``bind_launch`` starts one process per GPU with node rank and master address from
Slurm.  Runs are chained (``afterany``) so they go back to back like slurm/maskrcnn_4node.sbatch; once two runs
have failed, the runs not yet started are cancelled (MLPerf accepts one failed run of five).  Nodes, GPUs and
time default to the system config (config_<system>.sh: DGXNNODES, DGXNGPU, TRIAL_MINUTES).  Before anything is
submitted, tools/preflight.py judges the recipe, the batch, the data and the weights (``run_and_time.sh`` with
PREFLIGHT_ONLY=1, in the image when the runtime is installed here).

Afterwards ``<results>/result_<k>.txt`` holds run k's log (node 0's output: the MLPerf log of rank 0 plus the
RESULT line; an existing result file is never overwritten: k continues after the last result or run folder, each
run's folder claimed when it is submitted) and
``<results>/run_<k>/node<n>.log`` every node's output; then the review (``python -m mlperf_review <results>``:
compliance, score) is printed.  ``--cluster local`` runs a 1-node job on
this machine (no Slurm), ``--cluster debug`` in this process.  Exit code: 0 when every run succeeded.
"""

import argparse
import datetime
import importlib.util
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def read_config(system, env=None):
    """The variables config_<system>.sh exports (sourced by bash, with the caller's overrides)."""
    path = ROOT / f"config_{system}.sh"
    if not path.exists():
        raise SystemExit(f"submit: no {path.name}")
    out = subprocess.run(["bash", "-c", f'source "{path}" >/dev/null && env -0'], capture_output=True, env=env,
                         check=True).stdout
    return dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)


def walltime_minutes(text):
    """Slurm time formats (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S) -> whole minutes, rounded up."""
    days, _, rest = text.rpartition("-")
    parts = [int(x) for x in rest.split(":")]
    if days:
        parts += [0] * (3 - len(parts))  # D-H, D-H:M
        h, m, s = parts
    elif len(parts) == 3:
        h, m, s = parts
    else:
        h, (m, s) = 0, (parts + [0])[:2]
    return int(days or 0) * 1440 + h * 60 + m + (1 if s else 0)


class NodeTask:
    """Runs on every node of the job (one Slurm task per node): run_and_time.sh, output teed to a log."""

    def __init__(self, run_index, results, image, env, data, weights_dir, clear_caches, drop_caches_cmd,
                 runtime=None):
        self.run_index = run_index
        self.results = str(results)
        self.image = image
        self.env = dict(env)
        self.data = data
        self.weights_dir = weights_dir
        self.clear_caches = clear_caches
        self.drop_caches_cmd = drop_caches_cmd
        self.runtime = runtime

    def command(self):
        if self.image in (None, "", "none"):
            return [str(ROOT / "run_and_time.sh")]
        return [str(ROOT / "slurm" / "in_container.sh"), "./run_and_time.sh"]

    def container_env(self):
        """What slurm/in_container.sh reads: the image, the runtime and the binds (as run_experiments.sh)."""
        if self.image in (None, "", "none"):
            return {}
        binds = [f"{ROOT}:/workspace/object_detection:ro", f"{self.data or '/data'}:/data:ro",
                 f"{self.results}:/results"]
        if self.weights_dir:
            binds.append(f"{self.weights_dir}:/coco/models:ro")
        runtime = self.runtime or ("singularity" if shutil.which("singularity") or not shutil.which("apptainer")
                                   else "apptainer")
        return {"CONTAINER": self.image, "CONTAINER_RUNTIME": runtime, "CONTAINER_BINDS": ",".join(binds)}

    def __call__(self):
        import submitit

        try:
            je = submitit.JobEnvironment()
            node, hosts, job_id = je.node, list(je.hostnames), str(je.job_id)
        except RuntimeError:  # debug executor
            node, hosts, job_id = 0, ["127.0.0.1"], "debug"
        env = dict(os.environ)
        env.update(self.env)
        env.update(self.container_env())
        env.setdefault("LOGDIR", self.results)
        env["TRIAL_NAME"] = f"trial_{self.run_index}"
        if len(hosts) > 1:
            env["MASTER_ADDR"] = hosts[0]
        digits = re.sub(r"\D", "", job_id)
        env.setdefault("MASTER_PORT", str(29500 + (int(digits) % 1000 if digits else 0)))
        rundir = Path(self.results) / f"run_{self.run_index}"
        rundir.mkdir(parents=True, exist_ok=True)
        cmd = self.command()
        with open(rundir / f"node{node}.log", "w") as log:
            def emit(text):
                sys.stdout.write(text)
                sys.stdout.flush()
                log.write(text)
                log.flush()

            env["MLPERF_CACHE_CLEARED"] = "0"
            if self.clear_caches:
                r = subprocess.run(["bash", "-c", self.drop_caches_cmd], capture_output=True, text=True)
                if r.returncode != 0:  # MLPerf requires it: a run logging cache_clear false is not submittable
                    last = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
                    message = (f"run {self.run_index}: dropping the page cache failed on node {node} "
                               f"(--drop-caches-cmd '{self.drop_caches_cmd}': {last}): MLPerf requires it before "
                               "every run; run as root, --drop-caches-cmd 'sudo /sbin/sysctl vm.drop_caches=3', or "
                               "--no-clear-caches for runs not to be submitted; not trained")
                    emit(f"submit: error: {message}\n")
                    raise RuntimeError(message)
                env["MLPERF_CACHE_CLEARED"] = "1"  # the trainer logs cache_clear true, once
            # submitit asks Slurm for USR2 90 s before the time limit, sent to every process of the step: the
            # trainer stops on it (run_stop aborted); submitit's own handler would raise here (or requeue the job)
            # and the trainer's last lines would never reach the log. A handler, not SIG_IGN: the child's is reset.
            signal.signal(signal.SIGUSR2, lambda signum, frame: None)
            p = subprocess.Popen(cmd, cwd=str(ROOT), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True, bufsize=1)
            not_converged = False
            for line in p.stdout:
                emit(line)
                not_converged = not_converged or line.startswith("run_and_time: not converged")
            rc = p.wait()
        if rc != 0:
            raise RuntimeError(f"run {self.run_index}: node {node} training exited with code {rc}")
        return {"node": node, "rc": rc, "host": hosts[node] if node < len(hosts) else "?",
                "not_converged": not_converged}


def preflight(system, nodes, gpus_per_node, env, python, task, allow_non_rcp=False, gpus_here=True):
    """run_and_time.sh up to its preflight (tools/preflight.py: recipe, batch, data, weights), here, before anything
    is submitted, in the image when its runtime is installed here; returns its exit code (0: ready). ``gpus_here``
    False (Slurm: this host only submits, a login node as a rule): the GPUs are left to the job's nodes, where the
    trainer checks them before init_start."""
    env = dict(env, DGXSYSTEM=system, PYTHON=python, PREFLIGHT_ONLY="1", PREFLIGHT_NNODES=str(nodes))  # the job's
    if not gpus_here:
        env["PREFLIGHT_GPUS_ELSEWHERE"] = "1"
    env.pop("PREFLIGHT_DONE", None)
    env.update(task.container_env())
    if gpus_per_node:
        env["NPROC_PER_NODE"] = str(gpus_per_node)
    if allow_non_rcp:
        env["ALLOW_NON_RCP"] = "1"
    cmd = task.command()
    if "CONTAINER_RUNTIME" in env and not shutil.which(env["CONTAINER_RUNTIME"]):
        print(f"submit: {env['CONTAINER_RUNTIME']} is not installed here: the preflight runs on the job's nodes "
              "instead", file=sys.stderr)
        return 0
    return subprocess.run(cmd, env=env, cwd=str(ROOT)).returncode


def make_executor(args, folder, cfg):
    import submitit

    if not args.verbose:  # submitit warns on every poll where sacct (accounting) is unavailable
        logging.getLogger("submitit").setLevel(logging.ERROR)

    if args.cluster == "slurm":
        ex = submitit.SlurmExecutor(folder=folder, python=args.python)
        params = dict(job_name=args.job_name, nodes=args.nodes, ntasks_per_node=1, time=args.time_min,
                      exclusive=True, mem="0", srun_args=["--kill-on-bad-exit=1", "--cpu-bind=none"],
                      stderr_to_stdout=True)
        if args.gpus_per_node:
            params["gpus_per_node"] = args.gpus_per_node
        for key in ("partition", "account", "qos", "constraint"):
            if getattr(args, key):
                params[key] = getattr(args, key)
        ex.update_parameters(**params)
        return ex
    if args.nodes != 1:
        raise SystemExit(f"submit: --cluster {args.cluster} runs one node only (got --nodes {args.nodes})")
    ex = submitit.LocalExecutor(folder=folder, python=args.python) if args.cluster == "local" else \
        submitit.DebugExecutor(folder=folder)
    ex.update_parameters(timeout_min=args.time_min, nodes=1, tasks_per_node=1)
    return ex


def squeue_has(job_id):
    if not shutil.which("squeue"):
        return None
    r = subprocess.run(["squeue", "-h", "-j", str(job_id), "-o", "%T"], capture_output=True, text=True)
    if r.returncode != 0:
        return False
    return bool(r.stdout.strip())


def _failed(job):
    """A run that raised, or did not converge (its nodes exit 0 for that, NOT_CONVERGED_EXIT_CODE: a failed run
    for MLPerf's count all the same)."""
    try:
        if not job.done():
            return False
        return job.exception() is not None or any(r.get("not_converged") for r in job.results()
                                                   if isinstance(r, dict))
    except Exception:  # noqa: BLE001 - a job whose result cannot be read failed
        return True


def wait_all(jobs, cluster, poll=2.0, grace=30.0, max_failures=2):
    """Wait for every job; on Slurm also stop waiting for a job that left the queue without a result
    (submitit alone would wait forever on clusters without accounting/sacct). Once ``max_failures`` runs have
    failed, the runs not yet done are cancelled: the set cannot pass review any more."""
    gone_since = {}
    while True:
        pending = [j for j in jobs if not j.done()]
        if not pending:
            return
        if sum(_failed(j) for j in jobs) >= max_failures:
            print(f"submit: {max_failures} runs failed: the set cannot pass MLPerf review (one failure of five is "
                  f"allowed); cancelling the {len(pending)} run(s) not done", file=sys.stderr, flush=True)
            for j in pending:
                try:
                    j.cancel(check=False)
                except Exception:  # noqa: BLE001 - best effort
                    pass
            return
        if cluster == "slurm":
            for j in pending:
                if squeue_has(j.job_id) is False:
                    gone_since.setdefault(j.job_id, time.monotonic())
            if all(j.job_id in gone_since and time.monotonic() - gone_since[j.job_id] > grace for j in pending):
                return
        time.sleep(poll)


def reserve_run_folders(results, count):
    """The next ``count`` run indices after every existing result, each claimed by making its ``run_<k>`` folder
    now (mkdir fails for a folder that exists): a second submission into the same folder while this one's jobs
    are still queued, or at the same moment, takes the indices after these, so no result file is written twice."""
    names = (re.fullmatch(r"(?:result|run)_(\d+)(?:\.txt)?", p.name) for p in results.iterdir())
    taken = [int(m.group(1)) for m in names if m]
    indices, k = [], max(taken, default=-1) + 1
    while len(indices) < count:
        try:
            (results / f"run_{k}").mkdir()
            indices.append(k)
        except FileExistsError:  # claimed by a submission running beside this one
            pass
        k += 1
    return indices


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--system", default="DGXH100_4x8x4", help="config_<system>.sh (default DGXH100_4x8x4)")
    p.add_argument("--nodes", type=int, default=None, help="default: DGXNNODES")
    p.add_argument("--gpus-per-node", type=int, default=None, help="default: DGXNGPU (0: do not request GPUs)")
    p.add_argument("--time", default=None, help="per run, HH:MM:SS (default: the config's TRIAL_MINUTES)")
    p.add_argument("--partition")
    p.add_argument("--account")
    p.add_argument("--qos")
    p.add_argument("--constraint")
    p.add_argument("--image", default=str(ROOT / "singularity" / "maskrcnn.sif"),
                   help="Singularity image, or 'none' to run on the hosts")
    p.add_argument("--data", default=None, help="host dataset dir (bound to /data; default /data)")
    p.add_argument("--weights-dir", default=None, help="host dir with R-50.pkl, bound to /coco/models (default "
                   "/coco/models); without an image, the trainer's MODEL.WEIGHT is its R-50.pkl")
    p.add_argument("--nexp", type=int, default=1, help="number of runs (MLPerf needs 5)")
    p.add_argument("--results", default=None, help="results folder (default results/submit-<time>)")
    p.add_argument("--train-script", default=None, help="TRAIN_SCRIPT override (tests)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="extra environment for runs")
    p.add_argument("--no-clear-caches", dest="clear_caches", action="store_false")
    p.add_argument("--drop-caches-cmd", default="sync && echo 3 > /proc/sys/vm/drop_caches")
    p.add_argument("--parallel", action="store_true", help="do not chain the runs (afterany)")
    p.add_argument("--no-wait", dest="wait", action="store_false", help="submit and exit")
    p.add_argument("--cluster", choices=("slurm", "local", "debug"), default="slurm")
    p.add_argument("--python", default=sys.executable, help="python on the nodes (host mode)")
    p.add_argument("--job-name", default="maskrcnn")
    p.add_argument("--verbose", action="store_true", help="show submitit's warnings")
    p.add_argument("--allow-non-rcp", action="store_true",
                   help="submit a recipe that MLPerf review would reject (research runs): a warning, not a refusal")
    p.add_argument("--no-review", dest="review", action="store_false",
                   help="do not run python -m mlperf_review on the results")
    args = p.parse_args(argv)

    extra_env = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep:
            p.error(f"--env wants KEY=VALUE, got {item!r}")
        extra_env[key] = value
    cfg_env = dict(os.environ, **extra_env)
    cfg = read_config(args.system, cfg_env)
    args.nodes = args.nodes or int(cfg.get("DGXNNODES") or 1)
    if args.gpus_per_node is None:
        args.gpus_per_node = int(cfg.get("DGXNGPU") or 0)
    # one Slurm job per run: each gets the config's per-trial limit (TRIAL_MINUTES), not the NEXP-run WALLTIME
    args.time_min = walltime_minutes(args.time or cfg.get("TRIAL_MINUTES") or "01:00:00")
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    results = Path(args.results or ROOT / "results" / f"submit-{stamp}").resolve()
    results.mkdir(parents=True, exist_ok=True)
    folder = results / "submitit"
    if args.cluster != "slurm" and args.nodes != 1:
        raise SystemExit(f"submit: --cluster {args.cluster} runs one node only (got --nodes {args.nodes})")
    weights_dir = args.weights_dir or "/coco/models"
    probe = NodeTask(0, results, args.image, {}, args.data, weights_dir, False, "true")
    on_hosts = {}  # without an image: the site's data and weights folders are the trainer's paths
    if args.image in ("", "none"):
        on_hosts.update({"DATADIR": args.data} if args.data else {})
        on_hosts.update({"WEIGHTS": os.path.join(args.weights_dir, "R-50.pkl")} if args.weights_dir else {})
    host_env = dict(cfg_env, **on_hosts)
    rc = preflight(args.system, args.nodes, args.gpus_per_node, host_env, args.python, probe, args.allow_non_rcp,
                   gpus_here=args.cluster != "slurm")  # local and debug train on this host
    if rc:
        print(f"submit: the preflight failed with exit code {rc} (the line above says why); nothing submitted",
              file=sys.stderr)
        return rc

    # NOT_CONVERGED_EXIT_CODE=0: not converged is every node's outcome together; exiting 3, the first node would
    # have srun's --kill-on-bad-exit kill the others mid-exit (run_and_time.sh says it in the log instead)
    run_env = dict(extra_env, DGXSYSTEM=args.system, PYTHON=args.python, PREFLIGHT_DONE="1",
                   NOT_CONVERGED_EXIT_CODE="0")
    if args.allow_non_rcp:
        run_env["ALLOW_NON_RCP"] = "1"
    run_env.update(on_hosts)
    if args.train_script:
        run_env["TRAIN_SCRIPT"] = args.train_script
    ex = make_executor(args, folder, cfg)
    jobs = []
    indices = reserve_run_folders(results, args.nexp)
    for i in indices:
        if args.cluster == "slurm" and jobs and not args.parallel:
            ex.update_parameters(dependency=f"afterany:{jobs[-1].job_id}")
        task = NodeTask(i, results, args.image, run_env, args.data, weights_dir, args.clear_caches,
                        args.drop_caches_cmd)
        job = ex.submit(task)
        jobs.append(job)
        print(f"submit: run {i} -> job {job.job_id} ({args.cluster}, {args.nodes} node(s) x {args.gpus_per_node} "
              f"GPU(s), {args.time_min} min)", flush=True)
    if not args.wait:
        print(f"submit: results will be in {results}")
        return 0

    wait_all(jobs, args.cluster)
    failed = collect(jobs, indices, results)
    if args.review and any(results.glob("result_*.txt")):
        if importlib.util.find_spec("mlperf_review") is not None:
            subprocess.run([sys.executable, "-m", "mlperf_review", str(results)], check=False,
                           cwd=str(ROOT))
        else:
            print("submit: mlperf_review not importable; skipping the review")
    print(f"submit: {args.nexp - failed}/{args.nexp} runs succeeded; logs in {results}")
    return 1 if failed else 0


def collect(jobs, indices, results):
    """One line per run, node 0's log copied to ``result_<k>.txt``; returns the number of failed runs. A job
    :func:`wait_all` stopped waiting for (cancelled, or gone from the queue without a result) is failed without
    asking submitit for its result, which waits for ever where Slurm has no accounting (sacct)."""
    failed = 0
    for i, job in zip(indices, jobs):
        node0 = results / f"run_{i}" / "node0.log"
        status = "ok"
        try:
            if not job.done():
                raise RuntimeError("cancelled, or left the queue without a result")
            job.results()
        except Exception as e:  # noqa: BLE001 - report and go on
            status = f"FAILED ({str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__})"
            failed += 1
        if node0.exists():
            shutil.copyfile(node0, results / f"result_{i}.txt")
            if status == "ok" and "\nrun_and_time: not converged" in "\n" + node0.read_text(errors="replace"):
                status = "not converged (SOLVER.MAX_ITER reached without the targets)"
                failed += 1
        seconds = ""
        if node0.exists():
            for line in node0.read_text(errors="replace").splitlines():
                if line.startswith("RESULT,OBJECT_DETECTION,,"):
                    seconds = line.split(",")[3] + " s"
        print(f"submit: run {i} job {job.job_id}: {status} {seconds}".rstrip(), flush=True)
    return failed


if __name__ == "__main__":
    sys.exit(main())
