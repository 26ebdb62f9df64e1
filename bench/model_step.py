#!/usr/bin/env python
"""Training-step throughput of our Mask R-CNN vs torchvision's maskrcnn_resnet50_fpn.

Times forward + backward + SGD step on the same synthetic batch (same image size, precision and number of
classes), with a per-stage breakdown for our model, and prints a table. Example (GPU, MLPerf shapes):

    python bench/model_step.py --device cuda --height 800 --width 1333 --batch 8 --dtype float16 --nhwc

``--compile`` adds our compiled step (engine.compile.CompiledForward: the static batch, torch.compile with
inductor, CUDA graphs on GPU, fused SGD), timed interleaved with the eager step, and reports the compile time
(cold, then again after ``torch._dynamo.reset()`` with inductor's caches warm). ``--baseline DIR`` adds the eager
step of another checkout of this package (a git worktree of the previous commit), run in a second process that
takes its turn in the same interleaving:

    git worktree add /tmp/prev HEAD~1
    python bench/model_step.py --device cpu --height 800 --width 1333 --batch 2 --compile --baseline /tmp/prev
"""
import argparse
import math
import os
import statistics
import sys
import time

import torch

from maskrcnn_benchmark.config import get_cfg, merge_cfg_from_file, merge_cfg_from_list
from maskrcnn_benchmark.modeling import build_detection_model
from maskrcnn_benchmark.structures import BoxList, SegmentationMask, to_image_list

CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs",
                      "e2e_mask_rcnn_R_50_FPN_1x.yaml")


def synthetic_batch(batch, height, width, num_classes, objects=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    images, targets, tv_targets = [], [], []
    for _ in range(batch):
        images.append(torch.randn(3, height, width, generator=g) * 50)
        xy = torch.rand(objects, 2, generator=g) * torch.tensor([width * 0.7, height * 0.7])
        wh = torch.rand(objects, 2, generator=g) * torch.tensor([width * 0.3, height * 0.3]) + 16
        boxes = torch.cat((xy, xy + wh), 1)
        labels = torch.randint(1, num_classes, (objects,), generator=g)
        polys = []
        for (x1, y1, x2, y2) in boxes.tolist():
            cx, cy, rx, ry = (x1 + x2) / 2, (y1 + y2) / 2, (x2 - x1) / 2, (y2 - y1) / 2
            polys.append([[v for k in range(12) for v in (cx + rx * math.cos(k * math.pi / 6),
                                                          cy + ry * math.sin(k * math.pi / 6))]])
        t = BoxList(boxes, (width, height))
        t.add_field("labels", labels)
        t.add_field("masks", SegmentationMask(polys, (width, height)))
        targets.append(t)
        tv_targets.append({"boxes": boxes, "labels": labels,
                           "masks": t.get_field("masks").get_mask_tensor()})
    return images, targets, tv_targets


class Timer:
    def __init__(self, device):
        self.device = device
        self.totals = {}

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def __call__(self, name):
        timer = self

        class _Ctx:
            def __enter__(self):
                timer.sync()
                self.t = time.perf_counter()

            def __exit__(self, *exc):
                timer.sync()
                timer.totals[name] = timer.totals.get(name, 0.0) + time.perf_counter() - self.t

        return _Ctx()


def autocast(device, dtype):
    if dtype == torch.float32:
        return torch.autocast(device.type, enabled=False)
    return torch.autocast(device.type, dtype=dtype)


def make_ours(args, device, dtype, images, targets, timer):
    cfg = get_cfg()
    merge_cfg_from_file(cfg, CONFIG)
    per_gpu = args.batch
    merge_cfg_from_list(cfg, ["MODEL.DEVICE", device.type, "NHWC", args.nhwc,
                              "MODEL.RPN.FPN_POST_NMS_TOP_N_TRAIN", 1000 * per_gpu])
    model = build_detection_model(cfg).to(device).train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    images = [i.to(device) for i in images]
    targets = [t.to(device) for t in targets]

    def step(timed):
        t = timer if timed else None
        ctx = (lambda name: t(name)) if t else (lambda name: _Null())
        with ctx("data (batch padding)"):
            il = to_image_list(images, cfg.DATALOADER.SIZE_DIVISIBILITY)
            x = il.tensors.contiguous(memory_format=torch.channels_last) if args.nhwc else il.tensors
        with autocast(device, dtype):
            with ctx("backbone fwd"):
                feats = model.backbone(x)
            with ctx("rpn fwd (+proposals, loss)"):
                proposals, rpn_losses = model.rpn(il, feats, targets)
            with ctx("roi heads fwd (+sampling, loss)"):
                _, _, det_losses = model.roi_heads(feats, proposals, targets)
        loss = sum(rpn_losses.values()) + sum(det_losses.values())
        with ctx("backward"):
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
        with ctx("optimizer step"):
            scaler.step(opt)
            scaler.update()

    return step


def make_compiled(args, device, dtype, images, targets, mode):
    """Our compiled step: the batch in its static form (padded to a fixed size, 96 ground-truth slots), the
    model compiled by engine.compile.CompiledForward, torch's fused SGD. Returns ``(step, compile_seconds)``."""
    from maskrcnn_benchmark.engine.compile import CompiledForward, make_static, precompute_anchors
    from maskrcnn_benchmark.structures import TargetBatch

    cfg = get_cfg()
    merge_cfg_from_file(cfg, CONFIG)
    merge_cfg_from_list(cfg, ["MODEL.DEVICE", device.type, "NHWC", args.nhwc,
                              "MODEL.RPN.FPN_POST_NMS_TOP_N_TRAIN", 1000 * args.batch])
    model = make_static(build_detection_model(cfg).to(device).train())
    params = [p for p in model.parameters() if p.requires_grad]
    lr = torch.tensor(1e-3, device=device)
    opt = torch.optim.SGD(params, lr=lr, momentum=0.9, fused=True)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    d = cfg.DATALOADER.SIZE_DIVISIBILITY
    size = (-(-args.height // d) * d, -(-args.width // d) * d)
    il = to_image_list([i.to(device) for i in images], d, fixed_sizes=[size])
    batch = TargetBatch.from_boxlists(targets, max_gt=cfg.DATALOADER.MAX_ANNOTATIONS_PER_IMAGE).to(device)
    precompute_anchors(model, [size], device)
    forward = CompiledForward(model, mode, backend=args.compile_backend)

    def step():
        with autocast(device, dtype):
            losses = forward(il, batch)
        loss = sum(losses.values())
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    def first_call():
        t = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t

    cold = first_call()
    if forward.failure is not None:
        raise SystemExit(f"compile failed: {forward.failure!r}")
    warm = None
    if not args.no_warm_compile:
        torch._dynamo.reset()  # compile again: dynamo retraces, inductor's FX graph and kernel caches are warm
        warm = first_call()
    return step, cold, warm


class _Baseline:
    """The eager step of another checkout of the package, in a process of its own, one step per request."""

    def __init__(self, root, args):
        import subprocess

        env = dict(os.environ, PYTHONPATH=root)
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--device", args.device, "--height",
               str(args.height), "--width", str(args.width), "--batch", str(args.batch), "--dtype", args.dtype]
        cmd += ["--nhwc"] if args.nhwc else []
        self.proc = subprocess.Popen(cmd, env=env, cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        self.ready = self.proc.stdout.readline().strip()
        if not self.ready.startswith("ready"):
            raise SystemExit(f"the baseline worker in {root} did not start")

    def step(self):
        self.proc.stdin.write("step\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def worker(args, device, dtype):
    """``--worker``: the eager step of whatever package is on PYTHONPATH, timed on request (stdin ``step``)."""
    import maskrcnn_benchmark

    torch.manual_seed(0)  # the same initial weights as the main process's models
    images, targets, _ = synthetic_batch(args.batch, args.height, args.width, 81)
    cfg = get_cfg()
    merge_cfg_from_file(cfg, os.path.join(os.getcwd(), "configs", os.path.basename(CONFIG)))  # the checkout's
    merge_cfg_from_list(cfg, ["MODEL.DEVICE", device.type, "NHWC", args.nhwc,
                              "MODEL.RPN.FPN_POST_NMS_TOP_N_TRAIN", 1000 * args.batch])
    model = build_detection_model(cfg).to(device).train()
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-3, momentum=0.9)
    il = to_image_list([i.to(device) for i in images], cfg.DATALOADER.SIZE_DIVISIBILITY)
    targets = [t.to(device) for t in targets]
    print(f"ready {os.path.dirname(os.path.dirname(maskrcnn_benchmark.__file__))}", flush=True)
    for line in sys.stdin:
        t = time.perf_counter()
        with autocast(device, dtype):
            loss = sum(model(il, targets).values())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        print(time.perf_counter() - t, flush=True)
    return 0


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def make_torchvision(args, device, dtype, images, tv_targets):
    from torchvision.models import resnet50
    from torchvision.models.detection import MaskRCNN
    from torchvision.models.detection.backbone_utils import _resnet_fpn_extractor
    from torchvision.ops import FrozenBatchNorm2d

    # The recipe's backbone, not torchvision's from-scratch default (all layers trainable, BatchNorm):
    # frozen BN, stem + res2 frozen (3 trainable stages), 1000 post-NMS proposals per image.
    backbone = _resnet_fpn_extractor(resnet50(weights=None, norm_layer=FrozenBatchNorm2d), 3)
    model = MaskRCNN(backbone, num_classes=81, min_size=min(args.height, args.width),
                     max_size=max(args.height, args.width), rpn_post_nms_top_n_train=1000)
    model = model.to(device).train()
    if args.nhwc:
        model = model.to(memory_format=torch.channels_last)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    images = [i.to(device) / 255.0 for i in images]
    tv_targets = [{k: v.to(device) for k, v in t.items()} for t in tv_targets]

    def step():
        with autocast(device, dtype):
            losses = model(images, tv_targets)
        loss = sum(losses.values())
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    return step


PEAK = {}  # model name -> peak device memory of its steps (bytes, CUDA only)


def timed(fn, timer, *a, name=None):
    timer.sync()
    if name and timer.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(timer.device)
    t = time.perf_counter()
    fn(*a)
    timer.sync()
    elapsed = time.perf_counter() - t
    if name and timer.device.type == "cuda":
        PEAK[name] = max(PEAK.get(name, 0), torch.cuda.max_memory_allocated(timer.device))
    return elapsed


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--height", type=int, default=None, help="default 800 on GPU, 256 on CPU")
    p.add_argument("--width", type=int, default=None, help="default 1333 on GPU, 384 on CPU")
    p.add_argument("--batch", type=int, default=None, help="images per step (default 8 on GPU, 2 on CPU)")
    p.add_argument("--dtype", default=None, choices=["float32", "float16", "bfloat16"],
                   help="autocast precision (default float16 on GPU, float32 on CPU)")
    p.add_argument("--nhwc", action="store_true", help="channels_last for both models")
    p.add_argument("--iters", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--no-torchvision", action="store_true", help="skip the torchvision comparison")
    p.add_argument("--compile", action="store_true", help="also time our compiled step (and its compile time)")
    p.add_argument("--compile-mode", default=None,
                   help="torch.compile mode(s), comma-separated, each timed (default: reduce-overhead on GPU, default on the CPU)")
    p.add_argument("--compile-backend", default="inductor",
                   help="torch.compile backend (inductor; aot_eager or eager trace without code generation)")
    p.add_argument("--no-warm-compile", action="store_true",
                   help="compile once (skip the second, warm-cache compile that measures the warm compile time)")
    p.add_argument("--baseline", default="", metavar="DIR",
                   help="also time the eager step of the package checked out in DIR (e.g. a git worktree)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    gpu = device.type == "cuda"
    args.height = args.height or (800 if gpu else 256)
    args.width = args.width or (1333 if gpu else 384)
    args.batch = args.batch or (8 if gpu else 2)
    args.dtype = args.dtype or ("float16" if gpu else "float32")
    args.iters = args.iters or (20 if gpu else 3)
    args.warmup = args.warmup if args.warmup is not None else (5 if gpu else 1)
    dtype = getattr(torch, args.dtype)
    if args.worker:
        return worker(args, device, dtype)
    torch.manual_seed(0)
    if gpu:
        torch.backends.cudnn.benchmark = True
    images, targets, tv_targets = synthetic_batch(args.batch, args.height, args.width, 81)

    timer = Timer(device)
    ours = make_ours(args, device, dtype, images, targets, timer)
    tv = None if args.no_torchvision else make_torchvision(args, device, dtype, images, tv_targets)
    compiled = []  # (mode, step, cold seconds, warm seconds, times)
    if args.compile:
        for mode in (args.compile_mode or ("reduce-overhead" if gpu else "default")).split(","):
            compiled.append((mode, *make_compiled(args, device, dtype, images, targets, mode), []))
    baseline = _Baseline(os.path.abspath(args.baseline), args) if args.baseline else None
    for _ in range(args.warmup):
        ours(False)
        if tv:
            tv()
        for _, step, *_ in compiled:
            step()
        if baseline:
            baseline.step()
    # Interleave the models step by step so that all see the same machine load; report medians.
    ours_times, tv_times, baseline_times = [], [], []
    for _ in range(args.iters):
        ours_times.append(timed(ours, timer, True, name="ours, eager"))
        if tv:
            tv_times.append(timed(tv, timer, name="torchvision"))
        for mode, step, _, _, times in compiled:
            times.append(timed(step, timer, name=f"ours, compiled ({mode})"))
        if baseline:
            baseline_times.append(baseline.step())
    if baseline:
        baseline.close()
    stages = timer.totals
    ours_ips = args.batch / statistics.median(ours_times)
    name = torch.cuda.get_device_name(device) if gpu else f"CPU x{torch.get_num_threads()} threads"
    print(f"device: {name} | torch {torch.__version__} | image {args.height}x{args.width} | batch {args.batch} "
          f"| {args.dtype}{' | channels_last' if args.nhwc else ''} | {args.iters} timed iters (medians; the two models interleaved)")
    print()
    print(f"| {'stage (ours)':34} | {'ms/iter':>9} | {'share':>6} |")
    print(f"|{'-' * 36}|{'-' * 11}|{'-' * 8}|")
    staged = sum(stages.values())
    for k, v in stages.items():
        print(f"| {k:34} | {1000 * v / args.iters:9.1f} | {100 * v / staged:5.1f}% |")
    print()
    print(f"| {'model':34} | {'img/s':>9} | {'ratio':>6} |")
    print(f"|{'-' * 36}|{'-' * 11}|{'-' * 8}|")
    print(f"| {'maskrcnn_benchmark (ours)':34} | {ours_ips:9.2f} | {1.0:6.2f} |")
    rows = [(f"ours, compiled ({mode})", times) for mode, _, _, _, times in compiled]
    if baseline:
        rows.append((f"ours eager, {baseline.ready.split()[-1]}"[-34:], baseline_times))
    if tv:
        rows.append(("torchvision maskrcnn_resnet50_fpn", tv_times))
    for name, times in rows:
        ips = args.batch / statistics.median(times)
        print(f"| {name:34} | {ips:9.2f} | {ips / ours_ips:6.2f} |")
    print()
    print(f"| {'step (ms/iter, median)':34} | {'ms/iter':>9} |")
    print(f"|{'-' * 36}|{'-' * 11}|")
    print(f"| {'ours, eager':34} | {1000 * statistics.median(ours_times):9.0f} |")
    for name, times in rows:
        print(f"| {name:34} | {1000 * statistics.median(times):9.0f} |")
    for mode, _, cold, warm, times in compiled:
        print()
        again = "" if warm is None else f", {warm:.1f} s (again after torch._dynamo.reset(), caches warm)"
        print(f"compile ({mode}): {cold:.1f} s (first step, cold){again}; steady state compiled / eager: "
              f"{statistics.median(ours_times) / statistics.median(times):.2f}x")
    if PEAK:
        print()
        print("peak device memory (GiB, max over the timed steps): "
              + ", ".join(f"{k} {v / 2 ** 30:.2f}" for k, v in PEAK.items()))
    if tv:
        tv_ips = args.batch / statistics.median(tv_times)
        print()
        print(f"ours / torchvision speed-up: {ours_ips / tv_ips:.2f}x")
    # one machine-readable line (make gpu-check reads it)
    summary = [f"ours eager {ours_ips:.2f}"] + [f"{n.replace('ours, ', '')} {args.batch / statistics.median(t):.2f}"
                                                for n, t in rows]
    print(f"model step img/s: " + ", ".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
