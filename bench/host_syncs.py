#!/usr/bin/env python
"""Host syncs of one training step of the static (compiled-form) R-50-FPN step, counted on the CPU (or on CUDA).

    python bench/host_syncs.py [--images 2,12] [--size 320x480] [--dtype float32|bfloat16|float16] [--device cpu|cuda]
                               [KEY VALUE ...]   (config overrides, as the trainer takes them)

One step as the trainer runs it (``Trainer.run_step``: forward, backward, loss scaling, optimizer step, LR
schedule) of the MLPerf config's model in its static form (ground truth padded to
DATALOADER.MAX_ANNOTATIONS_PER_IMAGE, fixed ROI slots, the fused SGD of a compiled run), on a synthetic batch
padded to one fixed size, under :class:`~maskrcnn_benchmark.utils.host_syncs.HostSyncCounter`: every host read
(``.item()``, ``.tolist()``, ``int()/float()/bool()`` of a tensor) and every op whose output shape depends on the data
(nonzero, boolean-mask reads, masked_select, unique, bincount, torchvision NMS, repeat_interleave without
output_size), inside the package's custom ops too. Each site is printed with its count; masked writes are listed
apart (inductor lowers them to a select, no sync). The image size does not change the count (use a small one).

Then the checks that run outside the step, with their period: the non-finite loss check (every 20 iterations on
CUDA, every iteration on the CPU) and the metrics line (every 20 iterations).

On CUDA the step runs once more with torch's own hooks on, which see what an op-level count cannot: every blocking
copy between host and device (a tensor made from a Python list on the device, ``.cpu()``), stream, event and device
synchronizes (counted by the GPU trace callbacks of torch's CUDA sanitizer; each site named by the sync debug mode's
warning where Python sees one); each site printed with its count, then the Python stack of each call the callbacks
saw (its thread's last frames), and a last line ``CUDA synchronizing calls: N per step (static step, B images)``.

Last lines: ``host syncs: N per step (static step, B images)`` for each B.
"""
import argparse
import collections
import os
import sys
import threading
import traceback
import warnings

import torch

from maskrcnn_benchmark.cli.common import parse_with_overrides
from maskrcnn_benchmark.config import load_config
from maskrcnn_benchmark.engine.hooks import MetricsHook
from maskrcnn_benchmark.engine.trainer import Trainer
from maskrcnn_benchmark.modeling import build_detection_model
from maskrcnn_benchmark.solver import make_lr_scheduler, make_optimizer
from maskrcnn_benchmark.data.collate_batch import BatchCollator
from maskrcnn_benchmark.synthetic.batch import synthetic_batch
from maskrcnn_benchmark.utils.host_syncs import HostSyncCounter

CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs",
                      "e2e_mask_rcnn_R_50_FPN_1x.yaml")


def static_batch(cfg, n, height, width):
    images, targets, _ = synthetic_batch(n, height, width, cfg.MODEL.ROI_BOX_HEAD.NUM_CLASSES)
    return BatchCollator(cfg.DATALOADER.SIZE_DIVISIBILITY, ((height, width),),
                         cfg.DATALOADER.MAX_ANNOTATIONS_PER_IMAGE).collate(images, targets)


def build(images_per_gpu, dtype, device, opts=()):
    cfg = load_config(CONFIG, ["MODEL.DEVICE", device.type, "DTYPE", dtype, "SOLVER.IMS_PER_BATCH",
                               str(images_per_gpu), "MODEL.RPN.FPN_POST_NMS_TOP_N_TRAIN", str(1000 * images_per_gpu),
                               *opts])
    torch.manual_seed(0)
    model = build_detection_model(cfg).to(device).train()
    optimizer = make_optimizer(cfg, model, fused=True)
    trainer = Trainer(model, optimizer, make_lr_scheduler(cfg, optimizer), None, device,
                      cfg.SOLVER.MAX_ITER, 100, dtype=dtype, hooks=[MetricsHook(20, reduce=False)])
    return cfg, trainer


def count_step(n, height, width, dtype, device=torch.device("cpu"), opts=()):
    cfg, trainer = build(n, dtype, device, opts)
    images, targets = static_batch(cfg, n, height, width)
    images, targets = images.to(device), targets.to(device)
    trainer.run_step(images, targets)  # the first step (lazy initialization) is not the one counted
    with HostSyncCounter() as step:
        trainer.run_step(images, targets)
    cuda_syncs = cuda_sync_sites(lambda: trainer.run_step(images, targets)) if device.type == "cuda" else (None, None)
    with HostSyncCounter() as finite:
        trainer.check_finite()
    trainer.iter = trainer.storage.iter = 20
    trainer.hooks[0].before_train()
    with HostSyncCounter() as metrics:
        trainer.hooks[0].after_step()
    return step, finite, metrics, cuda_syncs


_TRACE = {"registered": False, "on": False, "count": 0, "stacks": collections.Counter()}
UNSEEN = "(no Python line: a C++ op called through torch.ops, whose warning bypasses Python's)"


def _count_sync(*_):
    """A GPU trace callback: counts the call and keeps the Python stack of the thread that made it (its last
    frames), since a sync debug warning can surface at a later Python line than the call's."""
    if _TRACE["on"]:
        _TRACE["count"] += 1
        frames = traceback.extract_stack()[:-1][-STACK_FRAMES:]
        _TRACE["stacks"][(threading.current_thread().name,
                          tuple(f"{os.path.relpath(f.filename)}:{f.lineno} ({f.name})" for f in frames))] += 1


STACK_FRAMES = 8
SYNC_WARNING = "called a synchronizing CUDA operation"  # torch's sync debug mode's warning (c10's CUDA functions)


def sync_warning_sites(caught):
    """``file:line`` of each sync debug mode warning in ``caught`` (``warnings.catch_warnings(record=True)``), by
    count. Only the synchronizing-call warning counts: turning the mode on also warns once per process that it "does
    not yet detect all synchronizing operations", and that notice is not a sync."""
    return collections.Counter(f"{os.path.relpath(w.filename)}:{w.lineno}" for w in caught
                               if SYNC_WARNING in str(w.message))


def cuda_sync_sites(fn):
    """The synchronizing CUDA calls of ``fn()`` by site. The count: torch's GPU trace callbacks for stream, device
    and event synchronizations (the hooks its CUDA sanitizer uses: every thread, backward's included, and C++ ops
    called through ``torch.ops``; switched on for the rest of the process). The sites: the warnings of torch's
    sync debug mode (``file:line`` of the Python line that made the call; a backward's are all its
    ``.backward()`` line), where Python sees them; the rest are counted under :data:`UNSEEN`."""
    if not _TRACE["registered"]:
        from torch.cuda import _gpu_trace

        torch._C._activate_gpu_trace()
        for register in (_gpu_trace.register_callback_for_stream_synchronization,
                         _gpu_trace.register_callback_for_device_synchronization,
                         _gpu_trace.register_callback_for_event_synchronization):
            register(_count_sync)
        _TRACE["registered"] = True
    torch.cuda.synchronize()
    sites = collections.Counter()
    _TRACE["count"] = 0
    _TRACE["stacks"] = collections.Counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        _TRACE["on"] = True
        try:
            fn()
        finally:
            _TRACE["on"] = False
            torch.cuda.set_sync_debug_mode("default")
    sites.update(sync_warning_sites(caught))
    if _TRACE["count"] > sum(sites.values()):
        sites[UNSEEN] = _TRACE["count"] - sum(sites.values())
    return sites, _TRACE["stacks"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", default="2,12", help="images per step (comma-separated)")
    p.add_argument("--size", default="320x480", help="HxW of the padded batch")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                   help="float16: CUDA only (its loss scaling is part of the step)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args, args.opts = parse_with_overrides(p, argv)  # KEY VALUE config overrides, anywhere
    device = torch.device(args.device)
    height, width = (int(v) for v in args.size.split("x"))
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    totals = []
    for n in (int(v) for v in args.images.split(",")):
        step, finite, metrics, (cuda_syncs, stacks) = count_step(n, height, width, args.dtype, device, args.opts)
        print(f"== one training step, static R-50-FPN, {n} images of {height}x{width}, {args.dtype}, {device}, "
              f"torch {torch.__version__}" + (f", {' '.join(args.opts)}" if args.opts else ""))
        print("\n".join(step.report()) or "  (no host read, no data-dependent shape, no masked write)")
        print(f"-- outside the step: non-finite loss check (every 20 iterations on CUDA, every iteration on the "
              f"CPU; and at epoch ends, after the last iteration and before checkpoints): {finite.total} host "
              f"sync(s); metrics line (every 20 iterations): {metrics.total}")
        for line in finite.report() + metrics.report():
            print(f"   {line}")
        if cuda_syncs is not None:
            print("-- the same step under torch.cuda.set_sync_debug_mode: synchronizing CUDA calls by site")
            for site, count in cuda_syncs.most_common():
                print(f"   {count:4d}  {site}")
            for (thread, frames), count in stacks.most_common():
                print(f"   {count:4d}  stack of the synchronizing call (thread {thread}), innermost last:")
                print("\n".join(f"            {frame}" for frame in frames))
        totals.append((n, step.total, None if cuda_syncs is None else sum(cuda_syncs.values())))
    print()
    for n, total, cuda_total in totals:
        if cuda_total is not None:
            print(f"CUDA synchronizing calls: {cuda_total} per step (static step, {n} images)")
    for n, total, _ in totals:
        print(f"host syncs: {total} per step (static step, {n} images)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
