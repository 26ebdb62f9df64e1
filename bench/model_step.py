#!/usr/bin/env python
"""Training-step throughput of the package's three forms of the step, and torchvision's Mask R-CNN, interleaved.

    python bench/model_step.py --device cuda --height 800 --width 1333 --batch 8 --dtype float16 --nhwc
    python bench/model_step.py --device cpu --height 800 --width 1333 --batch 2 --iters 2
    python bench/model_step.py [options] [KEY VALUE ...]   (config overrides, as the trainer takes them)

The same synthetic batch (same image size, precision, 81 classes) through:

* ``eager``: the eager step (tightly padded targets, ROI slots trimmed to the rows in use: host syncs);
* ``static eager``: the static step (the batch padded to one size, 96 ground-truth slots, fixed ROI slots, no host
  sync), run eagerly;
* ``compiled (<mode>)``: the static step under ``torch.compile`` (engine.compile.CompiledForward; inductor, CUDA
  graphs with ``reduce-overhead``), for each ``--compile-mode``;
* ``torchvision``: ``MaskRCNN`` with the recipe's backbone (frozen BN, 3 trainable stages);
* ``--baseline DIR``: the eager step of another checkout (a git worktree), in a process of its own.

On the CPU glibc's malloc keeps freed blocks, as a CPU training run sets it (maskrcnn_benchmark/utils/
host_memory.py): otherwise every large activation is a fresh ``mmap``, faulted in page by page at every step.

Forward + backward + SGD step, timed model after model in each round so that all see the same machine load (medians
over ``--iters`` rounds), also forward + backward alone (the step without the optimizer). Every model's setup
(compile time) is printed as soon as it is done, every round as soon as it is timed; a model that fails (a compile
or CUDA-graph capture error) is reported with its reason and the others go on. ``--json``: the same as JSON lines
(``{"event": "setup" | "failed" | "round" | "summary" | "memory", ...}``) that make gpu-check reads. ``--memory``:
the peak GPU memory of each of ``--memory-models`` (default: ``--models``), measured alone (one process per model
and batch, one step at each of ``--memory-batches``, default ``--batch``). On CUDA ``compiled`` defaults to
``reduce-overhead``: the bench measures the CUDA-graph mode, what ``COMPILE_MODE`` auto picks for a compiled run
on one GPU (engine/resolve.py).
``KEY VALUE`` pairs override the COCO config of the package's models; torchvision's model samples the same
``MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE`` ROIs per image (the tests pass 64: the static step's mask head then has 16
rows per image instead of 128, the most of a CPU smoke run's time).
"""
import argparse
import gc
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time

import torch

from maskrcnn_benchmark.cli.common import parse_with_overrides
from maskrcnn_benchmark.config import get_cfg, merge_cfg_from_file, merge_cfg_from_list
from maskrcnn_benchmark.modeling import build_detection_model
from maskrcnn_benchmark.solver import zero_momentum_buffers
from maskrcnn_benchmark.data.collate_batch import BatchCollator
from maskrcnn_benchmark.synthetic.batch import synthetic_batch

CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs",
                      "e2e_mask_rcnn_R_50_FPN_1x.yaml")
EAGER, STATIC, TORCHVISION = "eager", "static eager", "torchvision"


def keep_freed_blocks():
    """The host allocator as a CPU training run sets it (maskrcnn_benchmark/utils/host_memory.py), read from this
    checkout's file: a ``--baseline`` worker imports another checkout's package, which may not have it."""
    path = os.path.join(os.path.dirname(CONFIG), os.pardir, "maskrcnn_benchmark", "utils", "host_memory.py")
    spec = importlib.util.spec_from_file_location("_bench_host_memory", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.keep_freed_blocks()


def autocast(device, dtype):
    if dtype == torch.float32:
        return torch.autocast(device.type, enabled=False)
    return torch.autocast(device.type, dtype=dtype)


def _cfg(args, device):
    cfg = get_cfg()
    merge_cfg_from_file(cfg, CONFIG)
    merge_cfg_from_list(cfg, ["MODEL.DEVICE", device.type, "NHWC", args.nhwc,
                              "MODEL.RPN.FPN_POST_NMS_TOP_N_TRAIN", 1000 * args.batch, *args.opts])
    return cfg


class Step:
    """One model's training step: ``run()`` -> ``(step seconds, forward + backward seconds)``."""

    def __init__(self, name, forward, parameters, device, dtype, fused=False):
        self.name, self.forward, self.device, self.dtype = name, forward, device, dtype
        params = [p for p in parameters if p.requires_grad]
        lr = torch.tensor(1e-3, device=device) if fused else 1e-3
        self.opt = torch.optim.SGD(params, lr=lr, momentum=0.9, **({"fused": True} if fused else {}))
        if fused:
            zero_momentum_buffers(self.opt)  # else a float16 step the scaler skips leaves them unset (solver/build.py)
        self.scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
        self.setup_seconds = 0.0
        self.note = ""
        self.mask_rows = None  # rows of the mask head in the last step (the package's models)

    def _sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def run(self):
        self._sync()
        t0 = time.perf_counter()
        with autocast(self.device, self.dtype):
            losses = self.forward()
        loss = sum(losses.values())
        self.opt.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self._sync()
        t1 = time.perf_counter()
        self.scaler.step(self.opt)
        self.scaler.update()
        self._sync()
        return time.perf_counter() - t0, t1 - t0


def _count_mask_rows(step, model):
    """``step.mask_rows``: the rows the mask head computes in each step (eager models: a forward hook)."""
    def hook(module, inputs, output):
        step.mask_rows = output.shape[0]

    mask = getattr(model.roi_heads, "mask", None)  # none with MODEL.MASK_ON False
    if mask is not None:
        mask.feature_extractor.register_forward_hook(hook)
    return step


def make_eager(args, device, dtype, images, targets):
    model = build_detection_model(_cfg(args, device)).to(device).train()
    il, tg = BatchCollator(32).collate(images, targets)
    il, tg = il.to(device), tg.to(device)
    if args.nhwc:
        il.tensors = il.tensors.contiguous(memory_format=torch.channels_last)
    return _count_mask_rows(Step(EAGER, lambda: model(il, tg), model.parameters(), device, dtype), model)


def _static_inputs(args, cfg, device, images, targets, mode=None):
    """The static batch as a run with ``mode`` pads it: polygons to the run's floors (larger with CUDA graphs)."""
    from maskrcnn_benchmark.data.shapes import polygon_slots

    d = cfg.DATALOADER.SIZE_DIVISIBILITY
    size = (-(-args.height // d) * d, -(-args.width // d) * d)
    collate = BatchCollator(d, (size,), cfg.DATALOADER.MAX_ANNOTATIONS_PER_IMAGE,
                            polygon_slots(cfg, mode if args.compile_backend == "inductor" else "none")).collate
    il, batch = collate(images, targets)
    return size, il.to(device), batch.to(device)


def make_static_step(args, device, dtype, images, targets, mode=None):
    """The static step, eagerly (``mode`` None) or compiled with ``mode``."""
    from maskrcnn_benchmark.engine.compile import CompiledForward, precompute_anchors

    cfg = _cfg(args, device)
    model = build_detection_model(cfg).to(device).train()
    size, il, batch = _static_inputs(args, cfg, device, images, targets, mode)
    if mode is None:
        return _count_mask_rows(Step(STATIC, lambda: model(il, batch), model.parameters(), device, dtype,
                                     fused=True), model)
    precompute_anchors(model, [size], device)
    compiled = CompiledForward(model, mode, backend=args.compile_backend, batch_size=args.batch)

    def forward():
        losses = compiled(il, batch)
        if compiled.failure is not None:  # the trainer would run on eagerly: this is no compiled figure
            raise RuntimeError(f"compile failed, fell back to eager: {type(compiled.failure).__name__}: "
                               f"{str(compiled.failure).splitlines()[0] if str(compiled.failure) else ''}")
        return losses

    step = Step(f"compiled ({mode})", forward, model.parameters(), device, dtype, fused=True)
    mask = getattr(model.roi_heads, "mask", None)
    step.mask_rows = args.batch * mask.max_positives if mask is not None else None  # the static step's fixed rows
    if compiled.cudagraphs:
        _count_cudagraph_skips(step)
    t = time.perf_counter()
    step.run()  # compiles (and, with reduce-overhead, records the CUDA graphs on the next calls)
    step.run()
    step.setup_seconds = time.perf_counter() - t
    return step


def _count_cudagraph_skips(step):
    """``step.cudagraph_skips``: inductor's count of the graphs it left without CUDA graphs during this step's
    calls (it does so with no error: a CPU tensor in the graph, a mutated input, a graph re-recorded past its limit;
    a graph with no CUDA work at all counts too). The models' steps run one after another, so each call's
    difference is its own."""
    from maskrcnn_benchmark.engine.compile import cudagraph_skips

    inner, step.cudagraph_skips = step.run, 0

    def run():
        before = cudagraph_skips()
        try:
            return inner()
        finally:
            step.cudagraph_skips += cudagraph_skips() - before

    step.run = run


def make_torchvision(args, device, dtype, images, tv_targets):
    from torchvision.models import resnet50
    from torchvision.models.detection import MaskRCNN
    from torchvision.models.detection.backbone_utils import _resnet_fpn_extractor
    from torchvision.ops import FrozenBatchNorm2d

    # The recipe's backbone, not torchvision's from-scratch default (all layers trainable, BatchNorm):
    # frozen BN, stem + res2 frozen (3 trainable stages), 1000 post-NMS proposals per image.
    backbone = _resnet_fpn_extractor(resnet50(weights=None, norm_layer=FrozenBatchNorm2d), 3)
    # the ROIs sampled per image follow the package's config (KEY VALUE overrides included)
    rois = _cfg(args, device).MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE
    model = MaskRCNN(backbone, num_classes=81, min_size=min(args.height, args.width),
                     max_size=max(args.height, args.width), rpn_post_nms_top_n_train=1000,
                     box_batch_size_per_image=rois).to(device).train()
    if args.nhwc:
        model = model.to(memory_format=torch.channels_last)
    ims = [i.to(device) / 255.0 for i in images]
    tvt = [{k: v.to(device) for k, v in t.items()} for t in tv_targets]
    return Step(TORCHVISION, lambda: model(ims, tvt), model.parameters(), device, dtype)


class Baseline:
    """The eager step of another checkout of the package, in a process of its own, one step per request."""

    def __init__(self, root, args):
        env = dict(os.environ, PYTHONPATH=root)
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--device", args.device, "--height",
               str(args.height), "--width", str(args.width), "--batch", str(args.batch), "--dtype", args.dtype]
        cmd += (["--nhwc"] if args.nhwc else []) + (["--cudnn-benchmark"] if args.cudnn_benchmark else [])
        cmd += list(args.opts)
        self.proc = subprocess.Popen(cmd, env=env, cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        ready = self.proc.stdout.readline().strip()
        if not ready.startswith("ready"):
            raise RuntimeError(f"the baseline worker in {root} did not start")
        self.name = f"eager, {ready.split()[-1]}"[-34:]
        self.setup_seconds, self.note = 0.0, ""

    def run(self):
        self.proc.stdin.write("step\n")
        self.proc.stdin.flush()
        total, fwd_bwd = (float(v) for v in self.proc.stdout.readline().split())
        return total, fwd_bwd

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def worker(args, device, dtype):
    """``--worker``: the eager step of whatever package is on PYTHONPATH, timed on request (stdin ``step``)."""
    import maskrcnn_benchmark

    torch.manual_seed(0)
    images, targets, _ = synthetic_batch(args.batch, args.height, args.width, 81)
    step = make_eager(args, device, dtype, images, targets)
    print(f"ready {os.path.dirname(os.path.dirname(maskrcnn_benchmark.__file__))}", flush=True)
    for _ in sys.stdin:
        total, fwd_bwd = step.run()
        print(total, fwd_bwd, flush=True)
    return 0


class Out:
    """Text lines, or (``--json``) one JSON object per event."""

    def __init__(self, as_json):
        self.as_json = as_json

    def line(self, text, event=None, **fields):
        if self.as_json:
            if event:
                print(json.dumps({"event": event, **fields}), flush=True)
        else:
            print(text, flush=True)


def memory_alone(args, out):
    """Each model's peak GPU memory, alone in a process (one step after one warm-up step), at each of
    ``--memory-batches`` (default: ``--batch``)."""
    batches = [int(b) for b in (args.memory_batches or str(args.batch)).split(",")]
    for model, batch in [(m, b) for b in batches for m in (args.memory_models or args.models).split(",")]:
        cmd = [sys.executable, os.path.abspath(__file__), "--device", args.device, "--height", str(args.height),
               "--width", str(args.width), "--batch", str(batch), "--dtype", args.dtype, "--models", model,
               "--iters", "1", "--warmup", "1", "--json", "--peak", "--compile-backend", args.compile_backend]
        cmd += ["--nhwc"] if args.nhwc else []
        cmd += ["--cudnn-benchmark"] if args.cudnn_benchmark else []  # its workspaces count in the peak
        cmd += ["--compile-mode", args.compile_mode] if args.compile_mode else []
        cmd += list(args.opts)
        r = subprocess.run(cmd, capture_output=True, text=True)
        reasons = []
        for raw in r.stdout.splitlines():
            rec = json.loads(raw) if raw.startswith("{") else {}
            if rec.get("event") == "peak":
                rec["event"], rec["batch"] = "memory", batch
                out.line(f"peak GPU memory, {rec['model']} alone, batch {batch}: {rec['gib']:.2f} GiB", **rec)
            elif rec.get("event") == "failed":  # the step's own error (out of memory), caught by the child
                reasons.append(rec["reason"])
        if r.returncode:
            reason = reasons[:1] or r.stderr.strip().splitlines()[-1:] or [""]
            out.line(f"peak GPU memory, {model} alone, batch {batch}: FAILED (exit {r.returncode}: {reason[0]})",
                     event="memory", model=model, batch=batch, failed=reason)


def build(args, device, dtype, out, models):
    torch.manual_seed(0)
    images, targets, tv_targets = synthetic_batch(args.batch, args.height, args.width, 81)
    steps = []
    for model in models:
        modes = (args.compile_mode or ("reduce-overhead" if device.type == "cuda" else "default")).split(",") \
            if model == "compiled" else [None]
        for mode in modes:
            name = f"compiled ({mode})" if mode else {"eager": EAGER, "static": STATIC,
                                                      "torchvision": TORCHVISION}.get(model, model)
            t = time.perf_counter()
            try:
                if model == "eager":
                    step = make_eager(args, device, dtype, images, targets)
                elif model == "static":
                    step = make_static_step(args, device, dtype, images, targets)
                elif model == "compiled":
                    step = make_static_step(args, device, dtype, images, targets, mode)
                elif model == "torchvision":
                    step = make_torchvision(args, device, dtype, images, tv_targets)
                else:
                    raise ValueError(f"unknown model {model!r} (eager, static, compiled, torchvision)")
            except Exception as e:  # noqa: BLE001 - report it, measure the others
                reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                out.line(f"{name}: FAILED ({reason}); the other models go on", event="failed", model=name,
                         reason=reason)
                continue
            seconds = step.setup_seconds or (time.perf_counter() - t)
            skips = getattr(step, "cudagraph_skips", None)
            graphs = "" if skips is None else (" (CUDA graphs: inductor counted no skip)" if not skips else
                                               f" (CUDA graphs: inductor counted {skips} skip(s))")
            out.line(f"{name}: ready in {seconds:.1f} s" + (" (compile and first steps)" if mode else "") + graphs,
                     event="setup", model=name, seconds=round(seconds, 2), cudagraph_skips=skips)
            steps.append(step)
    return steps


def rounds_before_compiling(steps, args, out):
    """The uncompiled models' rounds, printed before anything compiles (up to 3 after the warm-up): a run cut by
    its time cap during a cold compile (minutes on a GPU) still leaves their figures. The summary is the
    interleaved rounds' only. Returns the steps that did not fail."""
    for r in range(args.warmup + min(3, args.iters)):
        row = {}
        for s in list(steps):
            try:
                total, _ = s.run()
            except Exception as e:  # noqa: BLE001 - out of memory, say: reported, the others go on
                reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                out.line(f"{s.name}: FAILED before compiling ({reason})", event="failed", model=s.name,
                         reason=reason)
                steps.remove(s)
                continue
            if r >= args.warmup:
                row[s.name] = round(total, 4)
        if row:
            out.line(f"round {r - args.warmup + 1} (before compiling): "
                     + ", ".join(f"{k} {v:.3f} s" for k, v in row.items()),
                     event="round", round=r - args.warmup + 1, phase="before compiling", seconds=row)
    return steps


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--height", type=int, default=None, help="default 800 on GPU, 256 on CPU")
    p.add_argument("--width", type=int, default=None, help="default 1333 on GPU, 384 on CPU")
    p.add_argument("--batch", type=int, default=None, help="images per step (default 8 on GPU, 2 on CPU)")
    p.add_argument("--dtype", default=None, choices=["float32", "float16", "bfloat16"],
                   help="autocast precision (default float16 on GPU, float32 on CPU)")
    p.add_argument("--nhwc", action="store_true", help="channels_last")
    p.add_argument("--iters", type=int, default=None, help="timed rounds (default 10 on GPU, 2 on CPU)")
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--models", default="eager,static,compiled,torchvision",
                   help="comma-separated: eager, static, compiled, torchvision")
    p.add_argument("--compile-mode", default=None,
                   help="torch.compile mode(s), comma-separated (default: reduce-overhead on GPU, default on the CPU)")
    p.add_argument("--compile-backend", default="inductor",
                   help="torch.compile backend (inductor; aot_eager or eager trace without code generation)")
    p.add_argument("--baseline", default="", metavar="DIR",
                   help="also time the eager step of the package checked out in DIR (e.g. a git worktree)")
    p.add_argument("--memory", action="store_true", help="also each model's peak GPU memory, alone (CUDA)")
    p.add_argument("--memory-models", default="", help="the models of the memory runs (default: --models; each "
                   "compiled one compiles again in its own process)")
    p.add_argument("--memory-batches", default="", help="images per GPU of the memory runs, comma-separated "
                   "(default: --batch; the H100 recipes train 12 per GPU)")
    p.add_argument("--cudnn-benchmark", action="store_true",
                   help="CUDA: turn on cuDNN's autotuner (torch.backends.cudnn.benchmark; the trainer does not)")
    p.add_argument("--glibc-malloc", action="store_true",
                   help="CPU: leave glibc's malloc as it is (a CPU training run, and this bench by default, keep "
                        "freed blocks: maskrcnn_benchmark/utils/host_memory.py)")
    p.add_argument("--json", action="store_true", help="JSON lines instead of text")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--peak", action="store_true", help=argparse.SUPPRESS)
    args, args.opts = parse_with_overrides(p, argv)  # KEY VALUE config overrides, anywhere
    device = torch.device(args.device)
    gpu = device.type == "cuda"
    args.height = args.height or (800 if gpu else 256)
    args.width = args.width or (1333 if gpu else 384)
    args.batch = args.batch or (8 if gpu else 2)
    args.dtype = args.dtype or ("float16" if gpu else "float32")
    args.iters = args.iters or (10 if gpu else 2)
    args.warmup = args.warmup if args.warmup is not None else (3 if gpu else 1)
    dtype = getattr(torch, args.dtype)
    if not gpu and not args.glibc_malloc:
        keep_freed_blocks()
    if gpu:
        # The trainer leaves cuDNN's autotuner off; each new input shape re-tunes it (COCO's batches vary in shape,
        # as do torchvision's mask rows: on an H200 its step went from 0.2 s to 1 s once they varied): measured as
        # the trainer runs unless asked for, in every process of the bench alike.
        torch.backends.cudnn.benchmark = args.cudnn_benchmark
    if args.worker:
        return worker(args, device, dtype)
    out = Out(args.json)
    name = torch.cuda.get_device_name(device) if gpu else f"CPU x{torch.get_num_threads()} threads"
    out.line(f"device: {name} | torch {torch.__version__} | image {args.height}x{args.width} | batch {args.batch} | "
             f"{args.dtype}{' | channels_last' if args.nhwc else ''} | {args.iters} rounds, models interleaved"
             + (" | cudnn.benchmark" if gpu and args.cudnn_benchmark else "")
             + (f" | {' '.join(args.opts)}" if args.opts else ""),
             event="setting", device=name, torch=torch.__version__, height=args.height, width=args.width,
             batch=args.batch, dtype=args.dtype, nhwc=args.nhwc, cudnn_benchmark=gpu and args.cudnn_benchmark,
             opts=list(args.opts))
    models = args.models.split(",")
    steps = build(args, device, dtype, out, [m for m in models if m != "compiled"])
    if "compiled" in models:
        if steps and not args.peak:
            steps = rounds_before_compiling(steps, args, out)
        steps += build(args, device, dtype, out, ["compiled"])
    if args.baseline:
        steps.append(Baseline(os.path.abspath(args.baseline), args))
    times = {s.name: [] for s in steps}
    failed = set()
    for r in range(args.warmup + args.iters):
        row = {}
        for s in steps:
            if s.name in failed:
                continue
            try:
                if args.peak and gpu and r == args.warmup:
                    torch.cuda.reset_peak_memory_stats(device)
                total, fwd_bwd = s.run()
            except Exception as e:  # noqa: BLE001 - e.g. a CUDA-graph capture that fails at a later replay
                failed.add(s.name)
                out.line(f"{s.name}: FAILED in round {r} ({type(e).__name__}: {str(e).splitlines()[0]})",
                         event="failed", model=s.name, reason=f"{type(e).__name__}: {str(e).splitlines()[0]}")
                continue
            if r >= args.warmup:
                times[s.name].append((total, fwd_bwd))
                row[s.name] = round(total, 4)
        if r >= args.warmup:
            out.line(f"round {r - args.warmup + 1}: " + ", ".join(f"{k} {v:.3f} s" for k, v in row.items()),
                     event="round", round=r - args.warmup + 1, seconds=row)
    if args.peak and gpu:
        for s in steps:
            if s.name not in failed:  # a step that failed (out of memory) has no peak to report
                out.line("", event="peak", model=s.name, gib=torch.cuda.max_memory_allocated(device) / 2 ** 30)
    for s in steps:
        if isinstance(s, Baseline):
            s.close()
    measured = {k: v for k, v in times.items() if v and k not in failed}  # a failure is not a rate
    if not measured:
        out.line("no model was measured", event="summary", models={})
        return 1
    ref = statistics.median(t for t, _ in measured[EAGER]) if EAGER in measured else None
    out.line("", event=None)
    out.line(f"| {'model':34} | {'step ms':>9} | {'img/s':>7} | {'vs eager':>8} | {'fwd+bwd ms':>10} | "
             f"{'img/s':>7} | {'mask rows':>9} |")
    out.line(f"|{'-' * 36}|{'-' * 11}|{'-' * 9}|{'-' * 10}|{'-' * 12}|{'-' * 9}|{'-' * 11}|")
    rows = {s.name: getattr(s, "mask_rows", None) for s in steps}
    skips = {s.name: getattr(s, "cudagraph_skips", None) for s in steps}  # setup and every round
    for k, v in measured.items():
        step_s = statistics.median(t for t, _ in v)
        fb = statistics.median(f for _, f in v)
        rel = f"{ref / step_s:7.2f}x" if ref else "       -"
        out.line(f"| {k:34} | {1000 * step_s:9.0f} | {args.batch / step_s:7.2f} | {rel} | {1000 * fb:10.0f} | "
                 f"{args.batch / fb:7.2f} | {'-' if rows.get(k) is None else rows[k]:>9} |", event="summary",
                 model=k, step_ms=round(1000 * step_s, 1), img_s=round(args.batch / step_s, 3),
                 fwd_bwd_ms=round(1000 * fb, 1), fwd_bwd_img_s=round(args.batch / fb, 3), rounds=len(v),
                 mask_rows=rows.get(k), cudagraph_skips=skips.get(k))
    out.line("", event=None)
    out.line("(vs eager: the eager step's time over this model's: above 1, faster than eager; mask rows: the mask "
             "head's rows per step, the positives of the batch in the eager step, the sampler's positive budget "
             "per image times the images in the static ones)")
    if args.memory and gpu:
        # each child measures its model alone only once this process's models, compiled graphs (their CUDA-graph
        # pools) and cached blocks are gone: on a smaller GPU a child ran out of memory beside them
        steps.clear()
        s = None  # the loops' last step (a model, its optimizer and batch) goes too
        torch._dynamo.reset()
        gc.collect()
        torch.cuda.empty_cache()
        memory_alone(args, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
