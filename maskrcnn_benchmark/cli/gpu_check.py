"""``make gpu-check``: first contact with a GPU node, in one command (its checks' time caps add up to about 20 min).

Runs what exists of these, each as its own program with a time cap, and writes ``results/gpu-check/report.md``
(every figure with the command that produced it; each program's full output beside it as ``<check>.log``):

1. the parity tests on CUDA, TF32 off (``MASKRCNN_TEST_DEVICE=cuda pytest tests/parity``): against the same ops
   and training step on the node's CPU (tests/parity/test_device_against_the_cpu.py, an oracle present on any
   node) and against the reference's golden outputs when ../shared/golden is beside the checkout;
2. the training step at 800x1333, batch 12 (the H100 recipes' images per GPU), AMP (float16), channels_last:
   eager, compiled (inductor) and CUDA-graphed (``reduce-overhead``, 20 timed iterations), against torchvision's
   Mask R-CNN in the same run, and the peak GPU memory of the eager, static and torchvision steps, each measured
   alone at 8 and 12 images (``bench/model_step.py``; a model that fails to compile is reported and the others'
   figures are kept);
3. the host syncs of one static training step on CUDA, float16, 2 and 12 images (``bench/host_syncs.py``: each
   host read and data-dependent shape, the custom ops' bodies included, and torch's own count of synchronizing CUDA
   calls, blocking copies included; any makes the check fail), and the hybrid
   input pipeline's device time per batch (``bench/input_pipeline.py --device cuda``);
4. the blocking evaluation per image (inference and post-processing of 300 images at 800x1333, one image per
   batch as every GPU config evaluates; ``bench/eval_step.py``), which the projection uses for COCO val's share of
   one GPU on one node (625 images), and the background COCO scoring of
   one epoch's results (5000 images, 100 detections each; ``bench/coco_eval.py --ours-only``);
5. a 200-iteration synthetic training run with AMP (the eager step, as a CUDA run defaults to): the loss must
   fall and the float16 loss scale must stop halving (skipped steps) after the first few iterations; then the
   same run for 100 iterations compiled with CUDA graphs (``--compile``, ``COMPILE_MODE reduce-overhead``, torch's
   ``TORCH_LOGS=cudagraphs``): it must not fall back to eager, and the report counts the CUDA graphs recorded in
   the warm-up and after it (on the clock);
6. NCCL all-reduce bus bandwidth when there is more than one GPU (``bench/allreduce.py``);
   between two nodes, ``slurm/gpu_check.sbatch`` adds the all-reduce across them against the bus-bandwidth floor
   ``NCCL_MIN_BUSBW`` and a 2-node, 20-iteration training run, judged by ``--across-nodes``
   (:func:`across_nodes`) into the same report;
7. the projected time to train at 1, 4, 8 and 32 nodes from these figures and the RCP's epochs, every term shown
   (:mod:`mlperf_review.projection`), also as ``projection.json``.

It runs from a checkout (the parity tests and bench/ scripts are the checkout's; ``tools/gpu_check.py`` is its
entry point). On a machine with no NVIDIA GPU at all it says so in one line and exits 0; where the kernel shows
NVIDIA devices (``/dev/nvidia*``, ``nvidia-smi``) that torch cannot use (a driver older than the wheel's CUDA, a
container started without ``--nv``) it fails with one line naming the driver (exit 15, ``NoGPU``): it never
passes on a GPU node without measuring. ``--device cpu --quick`` runs the same
pipeline with tiny sizes on the CPU (what the tests run: a rehearsal of every stage, the training step eager only,
whose compiled forms tests/test_bench_smoke.py measures; its figures are not GPU figures and the report says so).
The checks run in the order of ``PRIORITY`` (the training step's speed and its host syncs first), each under a
cap, their share of ``--budget``, but never less than what the check needs (measured on an H200); a check that no
longer fits in what is left is not started, and its line names the ``--only`` that runs it alone. The report and
``summary.json`` are rewritten after each check, and a SIGTERM (an outer time limit) stops the running check's
whole session and leaves the report of what ran.

Exit code 0 only when every check ran and passed (the all-reduce of a one-GPU node is skipped: nothing to
measure, said so); a check that failed, or did not run (its time cap or the budget ran out), makes the last line
``gpu-check: FAILED: ...; NOT RUN: ...`` and the exit code 1.
"""
import argparse
import datetime
import functools
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..utils.errors import UserError
from ..utils.fileio import write_text
from ..utils.processes import die_with_parent
from .common import Parser

ROOT = Path(__file__).resolve().parents[2]  # the checkout: tests/, bench/, tools/


@dataclass
class Check:
    name: str
    title: str
    cmd: list
    cap: float
    env: dict = field(default_factory=dict)
    need: float = 5.0  # the least time worth starting it with: less left in the budget, it is not started
    ok_codes: tuple = (0,)
    merge_output: bool = False  # stderr into stdout as it comes (the order of a program's and torch's log lines)
    status: str = "not run"
    seconds: float = 0.0
    output: str = ""
    figures: list = field(default_factory=list)  # (what, value) rows for the report

    @property
    def command(self):
        env = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in self.env.items())
        return (env + " " if env else "") + " ".join(shlex.quote(str(c)) for c in self.cmd)


def run(check, out_dir, deadline):
    left = max(deadline - time.monotonic(), 0)
    if left < max(check.need, 5):
        check.status = (f"NOT RUN (no time left in the budget: {left:.0f} s left, it needs {check.need:.0f} s; "
                        f"run it alone: --only {check.name} --budget {max(check.need, check.cap):.0f}, with another "
                        "--out: a run rewrites its folder's report)")
        return check
    cap = min(check.cap, left)
    t = time.monotonic()
    env = dict(os.environ, **{k: str(v) for k, v in check.env.items()})
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    try:
        code, check.output = run_capped([str(c) for c in check.cmd], ROOT, env, cap, merge=check.merge_output)
        if _STOP["requested"]:
            check.status = "NOT RUN (gpu-check was stopped while it ran)"
        elif code is None:
            check.status = f"NOT RUN (did not finish in its {cap:.0f} s cap)"
        else:
            check.status = "passed" if code in check.ok_codes else f"FAILED (exit {code})"
    finally:
        check.seconds = time.monotonic() - t
        (out_dir / f"{check.name}.log").write_text(check.command + "\n\n" + check.output)
    return check


def run_capped(cmd, cwd, env, cap, merge=False):
    """``(exit code, stdout + stderr)`` of a program given ``cap`` seconds, or ``(None, what it printed)`` when the
    cap ran out or gpu-check was stopped. It runs in its own session, and the whole session is killed at the cap or
    at a SIGTERM to gpu-check (:func:`_stop`): the processes a check starts (the memory runs of
    bench/model_step.py, inductor's compile workers) do not live on into the next check's measurements. The check's
    own process also dies with gpu-check (PR_SET_PDEATHSIG), should gpu-check be killed outright. ``merge``: its
    stderr goes into its stdout, in the order written."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merge else subprocess.PIPE,
                            start_new_session=True, preexec_fn=functools.partial(die_with_parent, parent=os.getpid()))
    _STOP["proc"] = proc
    try:
        if _STOP["requested"]:  # the SIGTERM came while it was being started
            _kill_session(proc)
        try:
            out, err = proc.communicate(timeout=cap)
            return (None if _STOP["requested"] else proc.returncode), _text(out) + _text(err)
        except subprocess.TimeoutExpired:
            _kill_session(proc)
            try:  # a descendant that left the session may still hold the pipes: do not wait for it
                out, err = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = b"", b""
            return None, _text(out) + _text(err)
    finally:
        _STOP["proc"] = None


_STOP = {"requested": False, "proc": None}


def _kill_session(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _stop(signum, frame):
    """SIGTERM (an outer time limit), Ctrl-C or a closed terminal: the running check's session is killed (its own
    session: the terminal's signal does not reach it), and gpu-check writes the report of what ran and ends (no
    exception is raised into whatever it was doing)."""
    _STOP["requested"] = signum
    if _STOP["proc"] is not None:
        _kill_session(_STOP["proc"])


def _text(b):
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


# ------------------------------------------------------------------------------------------------ what each reports
# pytest -v: a test's node id when it starts; its outcome (a reason, the progress) at the end of the line when it
# ends (the id greedy: an id may hold an outcome word)
VERBOSE_DONE = re.compile(r"^(\S+::.*) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)(?: \(.*\))?(?:\s+\[\s*\d+%\])?\s*$")
VERBOSE_STARTED = re.compile(r"^(\S+::.*\S)\s*$")
# pytest's last line: "==== 1 failed, 20 passed, 4 skipped, 2 warnings in 95.1s ===="
SUMMARY = re.compile(r"^=*\s*(\d+ [a-z]+(?:, \d+ [a-z]+)*) in [\d.]+s\b", re.M)
WORST = {"PASSED": 0, "XFAIL": 0, "XPASS": 0, "SKIPPED": 0, "ERROR": 1, "FAILED": 1}


def _verbose_outcomes(output):
    """``(passed, failed, skipped, running)`` from pytest -v's lines of the tests that ended, and the test that
    was running when the output ends (None between two tests)."""
    outcome, running = {}, None
    for line in output.splitlines():
        done = VERBOSE_DONE.match(line)
        if done:  # a teardown error is a second line for the same test: the worse outcome counts
            test, word = done.groups()
            if WORST[word] >= WORST.get(outcome.get(test), -1):
                outcome[test] = word
            running = None
        elif VERBOSE_STARTED.match(line):
            running = line.strip()
    words = list(outcome.values())
    passed = sum(words.count(o) for o in ("PASSED", "XFAIL", "XPASS"))
    return passed, words.count("FAILED") + words.count("ERROR"), words.count("SKIPPED"), running


def read_parity(c):
    last = SUMMARY.findall(c.output)
    if c.status.startswith(("NOT RUN (did not finish", "FAILED (exit")) and not last:
        # cut by the cap, or pytest itself died (a crash in a kernel): no summary line, the lines of the tests run
        passed, failed, skipped, running = _verbose_outcomes(c.output)
        cut = c.status.startswith("NOT RUN")
        c.figures.append((f"parity tests ({'cut by the cap' if cut else 'pytest ended without its summary'})",
                          f"{passed} passed, {failed} failed, {skipped} skipped before the "
                          f"{'cap' if cut else 'end'}"
                          + (f"; running at the {'cap' if cut else 'end'}: {running.removeprefix('tests/parity/')}"
                             if running else "")))
        if failed and cut:
            c.status = f"FAILED ({failed} failed before the cap: see parity.log)"
        return
    counts = {word: int(n) for n, word in (item.split(" ", 1) for item in last[-1].split(", "))} if last else {}
    passed, skipped = counts.get("passed", 0), counts.get("skipped", 0)
    failed = counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0)
    c.figures.append(("parity tests", f"{passed} passed, {failed} failed, {skipped} skipped"))
    if c.status == "passed" and not passed:  # every test skipped: no oracle here (../shared/golden not beside us)
        c.status = "NOT RUN (no parity test ran: the golden outputs, ../shared/golden, are not beside the checkout)"
    elif c.status == "passed" and skipped:  # a skipped test is no pass: said, with why where -rs said it
        # pytest -rs: "SKIPPED [n] tests/parity/...: <reason>"; the golden tests' reason names ../shared
        golden = sum(int(n) for n in re.findall(r"^SKIPPED \[(\d+)\] .*\.\./shared beside the checkout", c.output,
                                                re.M))
        c.status = (f"passed (against the node's CPU only: the {golden} golden tests skipped, ../shared/golden is "
                    "not beside the checkout)" if golden == skipped else f"passed ({skipped} skipped: see parity.log)")


def read_model_step(c):
    """bench/model_step.py --json: one event per line (setting, setup, failed, round, summary, memory). A run cut
    by its cap before its summary still gives each model's img/s: the median step of the rounds it printed, each
    such figure saying so. A model timed before anything compiled too gets that figure beside its own (the
    interleaved rounds come later, after the compiles and beside the compiled steps)."""
    rounds, early, summarized, failed, batch, graph_skips, memory_failed = {}, {}, set(), set(), None, {}, []
    for line in c.output.splitlines():
        if not line.startswith("{"):
            continue
        try:
            e = json.loads(line)
        except ValueError:
            continue
        kind = e.get("event")
        if kind == "setting":
            batch = e["batch"]
            c.figures.append(("setting", f"{e['device']}, torch {e['torch']}, {e['height']}x{e['width']}, batch "
                                         f"{e['batch']}, {e['dtype']}{', channels_last' if e.get('nhwc') else ''}"
                                         f"{', cudnn.benchmark' if e.get('cudnn_benchmark') else ''}"
                                         f"{', ' + ' '.join(e['opts']) if e.get('opts') else ''}"))
        elif kind == "setup" and e["model"].startswith("compiled"):
            c.figures.append((f"compile time, {e['model']}", f"{e['seconds']} s"))
            if e.get("cudagraph_skips") is not None:  # a mode with CUDA graphs: inductor counts what it skipped
                graph_skips[e["model"]] = (e["cudagraph_skips"], "while compiling and recording")
        elif kind == "failed":
            failed.add(e["model"])
            c.figures.append((f"{e['model']}", f"FAILED ({e['reason']})"))
        elif kind == "summary" and "model" not in e:  # no model was measured at all (every one failed)
            summarized.add(None)
        elif kind == "summary" and e["model"] in failed:  # failed after some rounds: a failure, not a rate
            summarized.add(e["model"])
        elif kind == "summary":
            summarized.add(e.get("model"))
            if e.get("cudagraph_skips") is not None:
                graph_skips[e["model"]] = (e["cudagraph_skips"], "in all its calls")
            rows = e.get("mask_rows")  # the mask head's rows: the batch's positives, or the static step's budget
            notes = [] if rows is None else [f"{rows} mask-head rows per step"]
            if batch and early.get(e["model"]):
                seconds = early[e["model"]]
                notes.append(f"{batch / statistics.median(seconds):.3f} in the {len(seconds)} rounds before compiling")
            c.figures.append((f"training step img/s, {e['model']}",
                              f"{e['img_s']}" + (f" ({'; '.join(notes)})" if notes else "")))
        elif kind == "round":
            for model, seconds in e["seconds"].items():
                (early if e.get("phase") == "before compiling" else rounds).setdefault(model, []).append(seconds)
        elif kind == "memory":
            if "gib" not in e:
                memory_failed.append(f"{e.get('model', '?')} at batch {e.get('batch', '?')}")
            c.figures.append((f"peak GPU memory alone, {e['model']}, batch {e.get('batch', '?')}",
                              f"{e['gib']:.2f} GiB" if "gib" in e else
                              f"FAILED ({(e.get('failed') or [''])[0] or 'its process failed'})"))
    for model, (skips, when) in graph_skips.items():
        c.figures.append((f"CUDA graphs, {model}", f"inductor counted no skip {when}" if not skips else
                          f"inductor counted {skips} skip(s) {when}: a graph it left without CUDA graphs "
                          "(TORCH_LOGS=cudagraphs names each; a graph with no CUDA work counts too)"))
    if batch and not summarized:  # cut before the summary: the rounds it printed, of the models that did not fail
        for model, seconds in ((m, s) for m, s in {**early, **rounds}.items() if m not in failed):
            c.figures.append((f"training step img/s, {model}",
                              f"{batch / statistics.median(seconds):.3f} (median of the {len(seconds)} rounds "
                              f"printed before the cap{'' if model in rounds else ', before compiling'})"))
    # cut by its cap in the peak-memory runs that follow the summaries: every rate is in, the memory figures not
    rates_in = bool(summarized - {None}) and (set(rounds) | set(early)) <= summarized | failed
    memory_cut = c.status.startswith("NOT RUN (did not finish") and rates_in
    if memory_cut:
        c.status = "passed"
        c.figures.append(("peak GPU memory", "not all measured: the cap ran out during the memory runs"))
    if failed and c.status == "passed":  # a step asked for that failed: the others' figures stay
        c.status = f"FAILED (the step of {', '.join(sorted(failed))} failed: see its figure)"
    if c.status == "passed" and not any(name.startswith("training step img/s") for name, _ in c.figures):
        c.status = "FAILED (no step timed: no round or summary line in its output)"
    if memory_failed and c.status == "passed":  # a peak-memory run asked for that failed (out of memory)
        c.status = f"FAILED (the peak memory run of {', '.join(memory_failed)} failed: see its figure)"
    if memory_cut and c.status == "passed":
        c.status = "passed (every rate measured; the peak-memory runs after them did not finish in its cap)"


def read_host_syncs(c):
    """bench/host_syncs.py's last lines, ``host syncs: N per step (static step, B images)``: a step that waits for
    the host (N > 0) fails the check, each site is in the check's log."""
    counts = re.findall(r"^host syncs: (\d+) per step \(static step, (\d+) images\)$", c.output, re.M)
    for n, images in counts:
        c.figures.append((f"host syncs per step, {images} images", n))
    # on CUDA, torch's own sync debug mode over the same step: also the blocking copies the op-level count misses
    cuda = re.findall(r"^CUDA synchronizing calls: (\d+) per step \(static step, (\d+) images\)$", c.output, re.M)
    for n, images in cuda:
        c.figures.append((f"synchronizing CUDA calls per step (torch.cuda.set_sync_debug_mode), {images} images", n))
    if c.status == "passed" and not counts:
        c.status = "FAILED (no count printed)"
    elif c.status == "passed" and any(int(n) for n, _ in counts + cuda):
        c.status = "FAILED (the step waits for the host: the sites are in host_syncs.log)"


def read_input(c):
    m = re.search(r"DeviceTransform, batch of (\d+) to (\S+) .*?\| ([\d.]+) ms", c.output)
    if m:
        c.figures.append((f"hybrid input, device side, batch of {m.group(1)} to {m.group(2)}", f"{m.group(3)} ms"))
    m = re.search(r"^input: (.*)$", c.output, re.M)
    if m:
        c.figures.append(("hybrid input, host side (this machine, one core)", m.group(1)))
    if c.status == "passed" and len(c.figures) < 2:
        c.status = "FAILED (its device-side row or its last line, input: ..., is missing from its output)"


FELL_BACK = re.compile(r"compil\w+ failed|running eagerly")  # the compile failure's warning (engine/compile.py)
LOSS_LINE = re.compile(r"iter: (\d+) .*?loss: ([\d.]+) .*?images/s: ([\d.]+)(?:\s+loss scale: ([\d.e+]+))?")


def read_training(c):
    rows = [(int(i), float(loss), float(ips), float(scale) if scale else None)
            for i, loss, ips, scale in LOSS_LINE.findall(c.output)]
    m = re.search(r"compiled the training step .*? in ([\d.]+) s", c.output)
    if m:
        c.figures.append(("compile time (synthetic model)", f"{m.group(1)} s"))
    if FELL_BACK.search(c.output):
        c.figures.append(("compile", "FELL BACK TO EAGER (see the log)"))
    if len(rows) < 2:
        c.figures.append(("training", "no loss lines"))
        if c.status == "passed":
            c.status = "FAILED (no loss lines)"
        return
    first, last = rows[0], rows[-1]
    falls = last[1] < first[1]
    c.figures.append(("loss", f"{first[1]:.3f} at iteration {first[0]} -> {last[1]:.3f} at {last[0]}"
                               f" ({'falls' if falls else 'DOES NOT FALL'})"))
    c.figures.append(("train img/s (last period; R-14-FPN, 128x128, batch 4: the synthetic config's, not R-50 at "
                      "800x1333)", f"{last[2]:.1f}"))
    scales = [(i, s) for i, _, _, s in rows if s is not None]
    if scales:
        # The GradScaler starts at 2^16 and halves at each skipped step; it doubles only after 1000 clean steps,
        # so within 200 iterations the skipped steps up to iteration i are log2(65536 / scale_i). A healthy run
        # skips only its first few: NVIDIA's v0.7 DGX-1 logs (same scaling) overflow at iterations 0-5, then not
        # before iteration 6123.
        import math

        skipped = [(i, round(math.log2(65536.0 / s))) for i, s in scales]
        late = skipped[-1][1] - skipped[0][1]
        c.figures.append(("skipped float16 steps", f"{skipped[0][1]} by iteration {skipped[0][0]}, "
                                                   f"{late} after it (loss scale {scales[-1][1]:g})"))
        if late > 0 and c.status == "passed":
            c.status = "FAILED (steps skipped after the first few)"
    if not falls and c.status == "passed":
        c.status = "FAILED (loss does not fall)"


WARMED_UP = re.compile(r"compiled the training step for \d+ image size\(s\)")
RECORDING = re.compile(r"Recording function=")  # torch's CUDA-graph trees, one line per graph (TORCH_LOGS=cudagraphs)


def read_compiled_training(c):
    """The training run's figures (:func:`read_training`: the loss falls, the float16 steps stop being skipped),
    and what the compiled step did: it falls back to eager (a failure of this check), inductor left graphs without
    CUDA graphs (the warm-up's warning), and the CUDA graphs torch recorded in the warm-up and after it (each one
    after it: a batch whose shapes the warm-up did not record, recorded on the clock)."""
    read_training(c)
    if FELL_BACK.search(c.output) and c.status == "passed":
        c.status = "FAILED (the compiled step fell back to eager: see the log)"
    if re.search(r"torch._dynamo hit config\.\w+", c.output) and c.status == "passed":  # new shapes run eagerly
        c.status = "FAILED (dynamo's recompile limit was hit: later shapes ran eagerly; see the log)"
    m = re.search(r"CUDA graphs: inductor left (\d+) compiled graph", c.output)
    if m:
        c.figures.append(("graphs left without CUDA graphs (inductor)", m.group(1)))
    warmed = WARMED_UP.search(c.output)
    # torch's words: "skipping cudagraphs due to ..." (a graph left without them), "skipping cudagraph due to
    # function ... exceeding max re-recording limit"
    late_skips = len(re.findall(r"skipping cudagraphs? due to", c.output[warmed.end():])) if warmed else 0
    if late_skips:  # TORCH_LOGS=cudagraphs: a graph compiled on the clock and left without CUDA graphs
        c.figures.append(("CUDA graphs skipped after the warm-up (torch's log)", str(late_skips)))
        if c.status == "passed":
            c.status = "FAILED (graphs compiled on the clock ran without CUDA graphs: see the log)"
    if warmed and RECORDING.search(c.output):
        before = len(RECORDING.findall(c.output, 0, warmed.start()))
        after = len(RECORDING.findall(c.output, warmed.end()))
        c.figures.append(("CUDA graphs recorded", f"{before} in the warm-up, {after} after it (on the clock: "
                                                  "batch shapes the warm-up did not record)"))
    graphed = warmed and "reduce-overhead" in c.output[warmed.start():].split("\n", 1)[0]  # the warm-up's line
    if graphed and "device cuda" in c.output and c.status == "passed":  # the graphs must replay: recorded once, not through the run, not never
        progress = [(int(m.group(1)), m.start()) for m in re.finditer(r"iter: (\d+) ", c.output)]
        half = next((at for it, at in progress if it > progress[-1][0] // 2), None) if progress else None
        if not RECORDING.search(c.output):
            c.status = "FAILED (no CUDA graph was recorded: the step ran without CUDA graphs)"
        elif half is not None and RECORDING.search(c.output, half):
            c.status = "FAILED (CUDA graphs were still recorded in the second half of the run: they do not replay)"


ONE_NODE_EVAL_IMAGES = 5000 // 8  # COCO val over one node's 8 GPUs: each GPU's share of an epoch's evaluation


def _json_lines(text):
    """The JSON objects of a program's output, one per line; anything else (a line cut by a cap, a warning that
    starts with a brace) is skipped."""
    rows = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def read_evaluation(c):
    summary = next((r for r in _json_lines(c.output) if r.get("event") == "summary"), None)
    if summary is None:
        if c.status == "passed":
            c.status = "FAILED (no summary line)"
        return
    c.figures.append(("blocking evaluation, ms per image", f"{summary['ms_per_image']}"))
    c.figures.append((f"blocking evaluation, {summary['images']} images of {summary['size']}, batch "
                      f"{summary['batch']}", f"{summary['seconds']} s"))


def measured_eval_gap(evaluation):
    """Seconds of blocking evaluation per epoch on one node: 625 images (COCO val / 8 GPUs) at the measured
    ms per image, or None (not measured, or its check did not pass)."""
    if evaluation is None or evaluation.status != "passed":
        return None
    per_image = dict(evaluation.figures).get("blocking evaluation, ms per image")
    return None if per_image is None else ONE_NODE_EVAL_IMAGES * float(per_image) / 1000


def read_scoring(c):
    """bench/coco_eval.py --ours-only: the seconds our scorer takes for an epoch's results (what a run's background
    process does while training goes on: the last epoch's scores arrive that much after its evaluation)."""
    row = next((r for r in _json_lines(c.output) if r.get("event") == "scoring"), None)
    if row is None:
        if c.status == "passed":
            c.status = "FAILED (no scoring line)"
        return
    c.figures.append((f"COCO scoring, {row['images']} images, {row['detections']} detections",
                      f"{row['seconds']} s ({row['backend']}, {row['workers']} worker processes)"))


def read_allreduce(c):
    m = re.search(r"^allreduce: (.*)$", c.output, re.M)
    c.figures.append(("all-reduce", m.group(1) if m else "no result line"))
    if c.status == "passed" and m and m.group(1).startswith("skipped"):  # one GPU: nothing was measured
        c.status = "skipped (one GPU: no all-reduce within the node)"
    elif c.status == "passed" and not m:
        c.status = "FAILED (no result line)"


# ------------------------------------------------------------------------------------------------ across nodes
def across_nodes(out_dir, floor):
    """The checks between two nodes that slurm/gpu_check.sbatch runs (slurm/run_experiments.sh, GPU_CHECK=1),
    judged from what it left in ``out_dir``: ``allreduce_2node.log`` (bench/allreduce.py --launched across the
    nodes) and ``training_2node.log`` (run_and_time.sh on both nodes, ``SOLVER.MAX_ITER 20``), each with its exit
    code in ``<name>.rc``. ``floor``: the inter-node bus bandwidth in GB/s (``NCCL_MIN_BUSBW``) below which the
    all-reduce fails; with no floor (0) the all-reduce is not judged: NOT RUN, never a pass."""
    def read(name):
        log, rc = out_dir / f"{name}.log", out_dir / f"{name}.rc"
        if not log.is_file():
            return None, None
        text = log.read_text(errors="replace")
        return text, int(rc.read_text().strip() or 1) if rc.is_file() else 1

    def last_line(text):
        return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "no output")

    ar = Check("allreduce_2node", "all-reduce between 2 nodes", [], 0)
    text, rc = read(ar.name)
    if text is None:
        ar.status = "NOT RUN (no all-reduce across nodes ran: a 1-node job, or NCCL_CHECK=0)"
    else:
        ar.output = text
        m = re.search(r"^allreduce: (\d+) ranks, .*busbw ([\d.]+) GB/s.*$", text, re.M)
        ar.figures.append(("inter-node all-reduce", m.group(0)[len("allreduce: "):] if m else "no result line"))
        ar.figures.append(("bus bandwidth floor", f"{floor:g} GB/s (NCCL_MIN_BUSBW)" if floor > 0 else
                           "none set (NCCL_MIN_BUSBW)"))
        if not m:
            ar.status = f"FAILED (exit {rc}: {last_line(text)})"
        elif floor <= 0:
            ar.status = "NOT RUN (no bus-bandwidth floor to judge against: set NCCL_MIN_BUSBW)"
        elif float(m.group(2)) < floor:
            ar.status = f"FAILED (busbw {float(m.group(2)):g} GB/s is below the floor of {floor:g} GB/s)"
        else:
            ar.status = "passed" if rc == 0 else f"FAILED (exit {rc})"
    tr = Check("training_2node", "training step on 2 nodes, 20 iterations", [], 0)
    text, rc = read(tr.name)
    if text is None:
        tr.status = "NOT RUN (a 1-node job: submit slurm/gpu_check.sbatch on 2 nodes)"
    else:
        tr.output = text
        m = re.search(r"&&&& MLPERF METRIC THROUGHPUT=([\d.]+) images / s", text)
        tr.figures.append(("2-node training throughput", f"{float(m.group(1)):.1f} img/s (20 iterations, "
                                                         "first-iteration warm-up included)" if m else
                           "no throughput line"))
        if rc != 0:
            tr.status = f"FAILED (exit {rc}: {last_line(text)})"
        elif not m:
            tr.status = "FAILED (no throughput line: training did not finish)"
        else:
            tr.status = "passed"
    return [ar, tr]


def append_across_nodes(out_dir, checks):
    """Adds the across-node checks to ``report.md`` and ``summary.json`` (the node's checks are already there)."""
    lines = ["", "## Across nodes (slurm/gpu_check.sbatch)", "", "| check | status | figure | value |",
             "|---|---|---|---|"]
    for c in checks:
        for i, (what, value) in enumerate(c.figures or [("", "")]):
            head = f"{c.title} | {c.status}" if i == 0 else " | "
            lines.append(f"| {head} | {what} | {str(value).replace('|', ',')} |")
    text = "\n".join(lines) + "\n"
    report_path, summary_path = out_dir / "report.md", out_dir / "summary.json"
    try:
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    except ValueError as e:
        raise UserError(f"gpu-check's summary '{summary_path}' is not JSON ({e}): the node's checks did not finish "
                        "writing it; run make gpu-check again") from None
    summary.update({c.name: {"status": c.status, "figures": c.figures} for c in checks})
    previous = report_path.read_text() if report_path.is_file() else ""
    write_text(report_path, previous + text, what="gpu-check report")
    write_text(summary_path, json.dumps(summary, indent=1), what="gpu-check summary")
    return text


# ---------------------------------------------------------------------------------------------------- projection
# The system whose recipes (config_<system>*.sh: global batches, 12 images per GPU) the projection is of; recorded
# in projection.json, and a job of another DGXSYSTEM does not take it unless its configs hold the same recipes
# (DGXH200's: slurm/projection.sh)
PROJECTED_SYSTEM = "DGXH100"


def config_batches(system=PROJECTED_SYSTEM):
    """``{nodes: global batch}`` of this checkout's ``config_<system>*.sh`` (DGXNNODES and the SOLVER.IMS_PER_BATCH
    of their EXTRA_CONFIG defaults): the recipes whose trials take their time limits from the projection."""
    batches = {}
    for path in sorted(ROOT.glob(f"config_{system}*.sh")):
        text = path.read_text()
        nodes = re.search(r'DGXNNODES="\$\{DGXNNODES:-(\d+)\}"', text)
        batch = re.search(r"SOLVER\.IMS_PER_BATCH (\d+)", text)
        if nodes and batch:
            batches.setdefault(int(nodes.group(1)), int(batch.group(1)))
    return batches


def projection(model_step, out_dir=None, gpus_per_node=8, evaluation=None, scoring=None, device="cuda",
               quick=False):
    """Lines of the projected time to train at 1, 4, 8 and 32 nodes (:mod:`mlperf_review.projection`: every term
    shown, the assumptions stated), from the measured per-GPU rate of the step a run takes: the eager one (``COMPILE``
    auto is off on CUDA, engine/resolve.py), or, when it was not measured, the slowest form measured (the
    projection sets the trials' time limits: a faster form that the run does not take would get them killed);
    ``out_dir``: also writes ``projection.json`` (``{"nodes": {"N": {"minutes": ...}}}``, what
    slurm/run_experiments.sh reads for the trials' time limit), from figures measured on a GPU at the recipe's
    sizes only (a CPU rehearsal's, or ``--quick``'s tiny batches', would set the trials' limits from a rate no
    run has)."""
    from mlperf_review import projection as paper

    rates = {name: float(re.match(r"[\d.]+", v).group()) for name, v in model_step.figures
             if name.startswith("training step img/s, ") and re.match(r"[\d.]+", v)}
    ours = {k: v for k, v in rates.items() if "torchvision" not in k}
    if not ours:
        return ["no training-step figure: nothing to project"]
    eager = "training step img/s, eager"
    if eager in ours:
        best_name, per_gpu, which = eager, ours[eager], "the step a run takes"
    else:
        best_name, per_gpu = min(ours.items(), key=lambda kv: kv[1])
        which = "the eager step, which a run takes, was not measured: the slowest form measured"
    node_rate = gpus_per_node * per_gpu
    gap = measured_eval_gap(evaluation)
    batches = config_batches()
    rows = paper.project(node_rate, paper.NVIDIA_ANCHORS[0].eval_gap_s if gap is None else gap,
                         batch_of=lambda n: batches.get(n, 96 if n == 1 else 256))
    short = lambda name: name.replace("training step img/s, ", "")  # noqa: E731
    lines = [f"per GPU: {per_gpu:.1f} img/s ({short(best_name)}, {which}; measured above, one GPU); one node: "
             f"{gpus_per_node} x {per_gpu:.1f} = {node_rate:.0f} img/s (assumed: no loss within a node, not measured "
             "here)"]
    fastest, fastest_rate = max(ours.items(), key=lambda kv: kv[1])
    if fastest_rate > per_gpu:
        mode = re.match(r"compiled \((.+)\)$", short(fastest))
        how = (f"a run takes it when asked: COMPILE True, COMPILE_MODE {mode.group(1)}" if mode else
               "no run takes it: the static step runs compiled only")
        lines.append(f"faster form measured: {short(fastest)}, {fastest_rate:.1f} img/s per GPU ({how}; not in this "
                     "projection)")
    if gap is not None:
        lines.append(f"evaluation gap on one node: {ONE_NODE_EVAL_IMAGES} images (COCO val / 8 GPUs) x "
                     f"{dict(evaluation.figures)['blocking evaluation, ms per image']} ms (measured above) = "
                     f"{gap:.2f} s per epoch")
    scoring = dict(scoring.figures) if scoring is not None else {}
    latency = next((v for k, v in scoring.items() if k.startswith("COCO scoring, ")), None)
    if latency is not None:
        lines.append(f"background scoring of an epoch's results: {latency} (measured above), off the training "
                     "path: it adds at most that once, the wait for the target epoch's scores (in the figures below "
                     "as in NVIDIA's, inside the evaluation gap's assumption)")
    lines += [row.line() for row in rows]
    lines += [f"assumption: {a}" for a in paper.assumptions(eval_gap_measured=gap is not None, batches=batches)]
    checks = [paper.reproduce(anchor) for anchor in paper.NVIDIA_ANCHORS]
    lines += [f"the same arithmetic on {anchor.name} ({anchor.source}): {p.time_to_train_s:,.0f} s, published "
              f"{anchor.time_to_train_s:,.0f} s" for anchor, p in zip(paper.NVIDIA_ANCHORS, checks)]
    if out_dir is not None and device != "cuda":
        lines.append(f"projection.json not written: figures measured on the {device} set no trial's time limit")
    elif out_dir is not None and quick:
        lines.append("projection.json not written: --quick's tiny sizes (a batch of 1 at 96x128) set no trial's "
                     "time limit")
    elif out_dir is not None and (eager not in ours or model_step.status.startswith("NOT RUN") or gap is None):
        # the trials' time limits come from it: from the rate of the step a run takes, measured to the end of its
        # rounds (a cut check prints no rate), and the measured evaluation gap (NVIDIA's is a tenth of ours,
        # docs/benchmarks.md); another model's failure (torchvision's, a compiled form's) does not touch them
        why = ("the eager step, which a run takes, was not measured" if eager not in ours else
               f"the training-step check was cut ({model_step.status}): its rate is of the rounds before"
               if model_step.status.startswith("NOT RUN") else
               "the evaluation gap was not measured (the evaluation check did not run or pass)")
        lines.append(f"projection.json not written: {why}; the trials keep their config's DGXRUNMINUTES")
    elif out_dir is not None:
        write_text(Path(out_dir) / "projection.json", what="gpu-check projection", text=json.dumps(
            {"system": PROJECTED_SYSTEM, "per_gpu_img_s": per_gpu, "form": best_name,
             "nodes": {str(r.nodes): {"minutes": round(r.time_to_train_s / 60, 2), "global_batch": r.global_batch,
                                      "epochs": r.epochs, "img_s": round(r.throughput, 1),
                                      "eval_gap_s": round(r.eval_gap_s, 3)} for r in rows}}, indent=1))
    return lines


# ------------------------------------------------------------------------------------------------------ the checks
# --quick: 64 sampled ROIs per image instead of the recipe's 512 (the static step's mask head: 16 rows per image
# instead of 128); the same code paths at a fraction of the CPU time
SMALL_ROI_BUDGET = ("MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE", "64")


PRIORITY = ("model_step", "host_syncs", "parity", "evaluation", "training", "compiled_training", "input", "scoring",
            "allreduce")
# Every GPU config evaluates one image per GPU per batch (TEST.IMS_PER_BATCH = the job's GPUs, as NVIDIA's one-node
# v0.7 configs do; its 4x8x4 config evaluates two; a test keeps ours equal): the evaluation check measures that
# batch, which the projection uses.
EVAL_IMAGES_PER_GPU = 1


def plan(args, out_dir):
    py = sys.executable
    q = args.quick
    dev = args.device
    data = out_dir / "synthetic"
    checks = [
        Check("parity", "parity tests on the device: against the node's CPU, and the golden outputs where present "
                        "(TF32 off)",
              [py, "-m", "pytest", "-v", "-rs", "-p", "no:cacheprovider", "--durations", "0", "tests/parity"]
              # quick: the eager NMS and ROIAlign tests (on the CPU not those comparing the device with the CPU)
              + (["-k", "(nms or multilevel) and not compiled"
                  + (" and not nms_keep_sets_equal_the_cpus and not nms_on_the_adversarial_cases" if dev == "cpu"
                     else "")] if q else []),
              # without the golden outputs 87 s on an H200; with them an H100 had run 10 of its 30 tests at 131 s
              60 if q else 300, env={"MASKRCNN_TEST_DEVICE": dev}, need=5 if q else 90),
        Check("model_step", "training step img/s: eager, compiled, CUDA-graphed, torchvision; peak memory",
              [py, "bench/model_step.py", "--device", dev, "--json"]
              + (["--height", "96", "--width", "128", "--batch", "1", "--iters", "1", "--warmup", "0",
                  "--models", "eager", *SMALL_ROI_BUDGET] if q else
                 ["--height", "800", "--width", "1333", "--batch", "12", "--dtype", "float16", "--nhwc",
                  "--iters", "20", "--warmup", "3", "--compile-mode", "reduce-overhead,default", "--memory",
                  "--memory-models", "eager,static,torchvision", "--memory-batches", "8,12"]),
              120 if q else 330, need=5 if q else 300),  # a cold compile of the static step: 122 s on an H200
        Check("host_syncs", "host syncs in one static training step (forward, backward, loss scaling, optimizer)",
              [py, "bench/host_syncs.py", "--device", dev]
              + (["--images", "1", "--size", "64x64", *SMALL_ROI_BUDGET] if q else
                 ["--images", "2,12", "--size", "320x480", "--dtype", "float16"]),
              60, need=5 if q else 60),
        Check("input", "hybrid input pipeline: device time per batch",
              [py, "bench/input_pipeline.py", "--device", dev] + (["--images", "8", "--rounds", "1"] if q else
                                                                 ["--images", "48", "--rounds", "2"]),
              60 if q else 30, need=5 if q else 20),  # 13 s on an H200
        Check("training", f"{40 if q else 200}-iteration synthetic training run"
                          f"{' (float32 on the CPU)' if dev == 'cpu' else ' with AMP (float16)'}",
              [py, "tools/train_mlperf.py", "--config-file", "configs/e2e_mask_rcnn_synthetic_cpu.yaml",
               "--seed", "1"] + (["--no-compile"] if q else []) +
              ["MODEL.DEVICE", dev, "DTYPE", "float32" if dev == "cpu" else "float16",
               "SOLVER.MAX_ITER", 40 if q else 200, "DATASETS.DATA_DIR", data, "OUTPUT_DIR", out_dir / "train",
               "MLPERF.MIN_BBOX_MAP", 0.99, "MLPERF.MIN_SEGM_MAP", 0.99, "DATALOADER.NUM_WORKERS", 1],
              150 if q else 90, ok_codes=(0, 3), need=5 if q else 60),  # 3: the targets (out of reach) not reached
        Check("compiled_training", f"the same run, {40 if q else 100} iterations, compiled"
                                   + (" (the eager backend on the CPU: dynamo's tracing and guards, no code generated)"
                                      if dev == "cpu" else " with CUDA graphs (COMPILE_MODE reduce-overhead)"),
              [py, "tools/train_mlperf.py", "--config-file", "configs/e2e_mask_rcnn_synthetic_cpu.yaml",
               "--seed", "1", "--compile", "MODEL.DEVICE", dev, "DTYPE", "float32" if dev == "cpu" else "float16",
               "COMPILE_MODE", "reduce-overhead"] + (["COMPILE_BACKEND", "eager"] if dev == "cpu" else []) +
              ["SOLVER.MAX_ITER", 40 if q else 100, "DATASETS.DATA_DIR", data,
               "OUTPUT_DIR", out_dir / "train_compiled", "MLPERF.MIN_BBOX_MAP", 0.99, "MLPERF.MIN_SEGM_MAP", 0.99,
               "DATALOADER.NUM_WORKERS", 1, "PER_EPOCH_EVAL", False],  # the training check evaluates
              150 if q else 180, env={"PYTHONUNBUFFERED": 1, **({} if dev == "cpu" else {"TORCH_LOGS": "cudagraphs"})},
              ok_codes=(0, 3), need=5 if q else 120, merge_output=True),
        Check("evaluation", "blocking evaluation: inference and post-processing per image",
              [py, "bench/eval_step.py", "--device", dev, "--json"]
              + (["--images", "2", "--height", "96", "--width", "128", "--batch", "2"] if q else
                 ["--images", "300", "--height", "800", "--width", "1333", "--batch", str(EVAL_IMAGES_PER_GPU),
                  "--dtype", "float16"]),
              60 if q else 80, need=5 if q else 60),
        Check("scoring", "background COCO scoring of one epoch's results (COCO val's 5000 images)",
              [py, "bench/coco_eval.py", "--ours-only", "--cache", out_dir / "scoring_data"]
              + (["--images", "200", "--dets", "20", "--classes", "3"] if q else ["--images", "5000"]),
              30 if q else 90, need=5 if q else 60),
        Check("allreduce", "NCCL all-reduce bus bandwidth within the node (passed: it ran; no floor judges it "
                           "here, NCCL_MIN_BUSBW judges the all-reduce across nodes)",
              [py, "bench/allreduce.py"] + (["--backend", "gloo", "--mbytes", "4", "--iters", "3"] if dev == "cpu"
                                           else []),
              60 if q else 20, need=5 if q else 10),
    ]
    # The caps share the budget in these proportions (they add up to it), but none below its need: with a budget
    # under the default the checks that no longer fit are not started (NOT RUN, each naming its `--only`), in
    # the order of PRIORITY: first what only a GPU can tell (the step's speed and its host syncs), then the rest.
    only = [name for name in (getattr(args, "only", "") or "").split(",") if name]
    checks = [c for c in checks if c.name in only] if only else checks
    total = sum(c.cap for c in checks)
    for c in checks:
        c.cap = max(c.need, c.cap * args.budget / total)
    return sorted(checks, key=lambda c: PRIORITY.index(c.name))


READERS = {"parity": read_parity, "model_step": read_model_step, "host_syncs": read_host_syncs, "input": read_input,
           "training": read_training, "compiled_training": read_compiled_training, "evaluation": read_evaluation, "scoring": read_scoring,
           "allreduce": read_allreduce}


def _smi(*query):
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        r = subprocess.run([smi, *query], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def stack(device):
    """What the figures were measured on: where (the training image or this Python environment), the GPUs,
    driver, CUDA, cuDNN, NCCL, torch, torchvision, apex (and so the optimizer a compiled run uses), inductor's graph
    partition, clocks and power limits, the GPUs' topology."""
    import torch
    import torchvision

    image = os.environ.get("MASKRCNN_GPU_CHECK_IMAGE", "")
    lines = [f"ran in the image {image} (make gpu-check IMAGE=...)" if image else
             f"ran in this Python environment ({sys.executable}), not in a training image: `make gpu-check "
             "IMAGE=path/to/maskrcnn.sif` measures the stack that trains"]
    lines.append(f"torch {torch.__version__} (CUDA {torch.version.cuda or 'none'}, cuDNN "
                 f"{torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else 'none'}), torchvision "
                 f"{torchvision.__version__}")
    if device == "cuda":
        nccl = ".".join(map(str, torch.cuda.nccl.version())) if hasattr(torch.cuda, "nccl") else "?"
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        lines.append(f"{len(names)} GPU(s): {', '.join(sorted(set(names)))}; NCCL {nccl}")
    try:
        import apex  # noqa: F401
        apex_line = "apex present: a compiled run uses apex FusedSGD"
    except ImportError:
        apex_line = "apex absent: a compiled run uses torch's fused SGD"
    lines.append(apex_line)
    try:
        from torch._inductor import config as inductor_config
        lines.append(f"inductor graph_partition, this torch's default: "
                     f"{getattr(inductor_config, 'graph_partition', 'not in this torch')} (a compiled run with CUDA "
                     "graphs sets it on)")
    except ImportError:
        lines.append("inductor: not importable")
    driver = _smi("--query-gpu=driver_version,clocks.max.sm,clocks.sm,power.limit", "--format=csv,noheader")
    if driver:
        lines.append(f"driver, max/current SM clock, power limit: {driver.splitlines()[0]}")
    topo = _smi("topo", "-m")
    if topo:
        lines.append("nvidia-smi topo -m:\n\n```\n" + topo + "\n```")
    return lines


def report(checks, out_dir, args, device_name, started, stack_lines=None):
    lines = [f"# gpu-check: {device_name}", "",
             f"{started:%Y-%m-%d %H:%M} UTC, `python tools/gpu_check.py{' ' + ' '.join(sys.argv[1:]) if sys.argv[1:] else ''}`"
             f" (torch {args.torch_version}). Each check's command is under Commands; each program's output is in "
             f"`<check>.log` beside this report.", ""]
    if args.device == "cpu":
        lines += [f"**CPU run{' (`--quick`)' if args.quick else ''}: these are not GPU figures.**", ""]
    elif args.quick:
        lines += ["**`--quick`: tiny sizes (a batch of 1 at 96x128), not the recipe's: no figure here is a "
                  "training rate.**", ""]
    lines += ["## Stack", ""] + [f"- {line}" for line in (stack_lines or stack(args.device))] + [""]
    lines += ["| check | status | seconds | figure | value |", "|---|---|---:|---|---|"]
    for c in checks:
        rows = c.figures or [("", "")]
        for i, (what, value) in enumerate(rows):
            head = f"{c.title} | {c.status} | {c.seconds:.0f}" if i == 0 else " | | "
            lines.append(f"| {head} | {what} | {str(value).replace('|', ',')} |")
    lines += ["", "## Commands", ""]
    lines += [f"- {c.name}: `{c.command}`" for c in checks]
    lines += ["", "## Projected time to train (mlperf_review/projection.py: every term shown)", ""]
    model = next((c for c in checks if c.name == "model_step"), None)
    evaluation = next((c for c in checks if c.name == "evaluation"), None)
    scoring = next((c for c in checks if c.name == "scoring"), None)
    (out_dir / "projection.json").unlink(missing_ok=True)  # rewritten below from this run's figures, or gone
    try:
        projected = (projection(model, out_dir, evaluation=evaluation, scoring=scoring, device=args.device,
                                quick=args.quick)
                     if model else
                     ["the training step was not measured"])
    except Exception as e:  # noqa: BLE001 - the report of the checks must not be lost to its projection
        projected = [f"projection unavailable ({type(e).__name__}: {e})"]
    lines += [f"- {line}" for line in projected]
    text = "\n".join(lines) + "\n"
    write_text(out_dir / "report.md", text, what="gpu-check report")
    summary = {c.name: {"status": c.status, "seconds": round(c.seconds, 1), "figures": c.figures} for c in checks}
    write_text(out_dir / "summary.json", json.dumps(summary, indent=1), what="gpu-check summary")
    return text


def main(argv=None):
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--quick", action="store_true", help="tiny sizes (with --device cpu: what the tests run)")
    p.add_argument("--out", default=str(ROOT / "results" / "gpu-check"))
    p.add_argument("--budget", type=float, default=1180.0, help="seconds for all checks together (default 1180)")
    p.add_argument("--only", default="", help="comma-separated subset of: " + ",".join(READERS))
    p.add_argument("--across-nodes", action="store_true",
                   help="judge the checks slurm/gpu_check.sbatch ran between two nodes (their logs in --out) and "
                        "add them to the report")
    p.add_argument("--min-busbw", type=float, default=0.0, metavar="GBPS",
                   help="with --across-nodes: the inter-node bus bandwidth floor (NCCL_MIN_BUSBW)")
    args = p.parse_args(argv)
    unknown = sorted(set(filter(None, args.only.split(","))) - set(READERS))
    if unknown:
        p.error(f"--only: no check named {', '.join(unknown)} (the checks: {', '.join(READERS)})")
    from .exit_codes import run_program

    return run_program(lambda: _across_nodes(args) if args.across_nodes else _main(args))


def _across_nodes(args):
    out_dir = Path(args.out)
    checks = across_nodes(out_dir, args.min_busbw)
    print(append_across_nodes(out_dir, checks), end="")
    bad = [f"{c.name}: {c.status}" for c in checks if c.status != "passed"]
    print(f"gpu-check across nodes: {'FAILED: ' + '; '.join(bad) if bad else 'passed: both checks measured'}",
          flush=True)
    return 1 if bad else 0


def _main(args):
    import torch

    from ..engine.preflight import _driver_version, _nvidia_devices, check_gpus

    args.torch_version = torch.__version__
    if args.device == "cuda" and not torch.cuda.is_available():
        if not (_nvidia_devices() or _driver_version()):  # no NVIDIA GPU at all: nothing to check, one line
            print(f"gpu-check: no NVIDIA GPU on this machine (torch {torch.__version__}, CUDA build "
                  f"{torch.version.cuda or 'none'}): nothing to check; run `make gpu-check` on a GPU node")
            return 0
        check_gpus(_CudaConfig(), 1, torch.cuda)  # a GPU torch cannot use: NoGPU, one line naming the driver
    device_name = (f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}" if args.device == "cuda"
                   else f"CPU ({os.cpu_count()} cores)")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc)
    deadline = time.monotonic() + args.budget
    made = subprocess.run([sys.executable, "tools/make_synthetic_coco.py", "--out", str(out_dir / "synthetic"),
                           "--train", "40" if args.quick else "200", "--val", "8" if args.quick else "50", "--seed",
                           "0"], cwd=ROOT, capture_output=True, text=True)
    if made.returncode:  # its own error line, not a CalledProcessError that drops it
        last = (made.stderr.strip().splitlines() or [""])[-1]
        raise UserError(f"making the synthetic dataset in {out_dir / 'synthetic'} failed (exit "
                        f"{made.returncode}): {last}")
    checks = plan(args, out_dir)  # --only: those checks, sharing the budget
    for name in READERS:  # an earlier run's output: a check that does not run now leaves none beside the report
        (out_dir / f"{name}.log").unlink(missing_ok=True)
    stack_lines = stack(args.device)
    _STOP.update(requested=False, proc=None)
    previous = {sig: signal.signal(sig, _stop) for sig in STOP_SIGNALS}
    try:
        for c in checks:
            if _STOP["requested"]:
                c.status = "NOT RUN (gpu-check was stopped before it)"
                continue
            print(f"gpu-check: {c.name}: {c.command}", flush=True)
            run(c, out_dir, deadline)
            _read(c)
            print(f"gpu-check: {c.name}: {c.status} ({c.seconds:.0f} s)", flush=True)
            report(checks, out_dir, args, device_name, started, stack_lines)  # what ran so far, kept
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if _STOP["requested"]:
        report(checks, out_dir, args, device_name, started, stack_lines)
        name = signal.Signals(_STOP["requested"]).name
        print(f"gpu-check: stopped ({name}): the report holds what ran", flush=True)
        return 128 + _STOP["requested"]
    print(report(checks, out_dir, args, device_name, started, stack_lines))
    code, line = verdict(checks)
    print(line, flush=True)
    return code


def verdict(checks):
    """``(exit code, last line)``: 0 only when every check passed or was skipped (one GPU: no all-reduce); a check
    not run is named with its reason, a parity stage that compared with the node's CPU only says so."""
    failed = [c.name for c in checks if c.status.startswith("FAILED")]
    not_run = [f"{c.name} ({c.status[len('NOT RUN ('):-1]})" if c.status.startswith("NOT RUN (") else c.name
               for c in checks if not c.status.startswith(("passed", "FAILED", "skipped"))]
    skipped = [f"{c.name} ({c.status[len('skipped ('):-1]})" for c in checks if c.status.startswith("skipped")]
    if failed or not_run:
        return 1, f"gpu-check: FAILED: {', '.join(failed) or '-'}; NOT RUN: {', '.join(not_run) or '-'}"
    measured = len(checks) - len(skipped)
    cpu_only = any(c.name == "parity" and c.status.startswith("passed (against the node's CPU only") for c in checks)
    return 0, (f"gpu-check: passed: {'all ' if not skipped else ''}{measured} check{'s' * (measured != 1)} measured"
               + (", parity against the node's CPU only (the golden outputs absent)" if cpu_only else "")
               + (f"; skipped: {', '.join(skipped)}" if skipped else ""))


def _read(c):
    """The check's figures from its output; a reader that fails on an output it did not expect fails the check,
    not gpu-check (the report of the others is still written)."""
    if not c.output:
        if c.status == "passed":  # exit 0 and not a line: the readers' own guards never ran
            c.status = "FAILED (it printed nothing: no figure to report)"
        return
    try:
        READERS[c.name](c)
    except Exception as e:  # noqa: BLE001 - one check's unreadable output must not lose the report
        c.status = f"FAILED (its output could not be read: {type(e).__name__}: {e})"


class _CudaConfig:
    """What :func:`~maskrcnn_benchmark.engine.preflight.check_gpus` reads of a config: a CUDA run."""

    class MODEL:
        DEVICE = "cuda"
