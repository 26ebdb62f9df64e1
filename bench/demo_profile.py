#!/usr/bin/env python
"""Where one demo iteration and one demo evaluation spend their time, by stage (``make demo``'s run, measured).

    python bench/demo_profile.py [--iters 60] [--warmup 10] [--data datasets/synthetic] [--threads N]
                                 [--weights results/demo/model_0000900.pth] [--no-eval] [KEY VALUE ...]

The demo's own pieces, built as a run builds them (configs/e2e_mask_rcnn_synthetic_cpu.yaml resolved for this
machine, make_data_loader + DeviceLoader, make_optimizer, the Trainer with its metrics hook), on the demo's
synthetic dataset (tools/make_synthetic_coco.py --train 600 --val 100 --seed 0, made when ``--data`` has none).
Each stage's functions are wrapped with a wall-clock timer (the CPU runs synchronously, so a stage's time is its
compute); nothing in the package changes. Training: ``--warmup`` iterations, then ``--iters`` timed ones, from the
model's initialization or from ``--weights`` (``--iters 0``: evaluation only). Evaluation: the whole validation set
as an epoch end runs it (run_inference into the COCOEvaluator: the blocking part), then the COCO scoring a run does
in a background process, timed here in-process.

Prints two tables (stage, ms per iteration or per evaluation, share) and the img/s; docs/benchmarks.md keeps them.
"""
import argparse
import collections
import os
import subprocess
import sys
import time
import warnings
from contextlib import contextmanager

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs", "e2e_mask_rcnn_synthetic_cpu.yaml")


class Stopwatch:
    """Seconds per stage; a stage entered inside another stage counts for the inner one only."""

    def __init__(self):
        self.seconds = collections.defaultdict(float)
        self._stack = []

    @contextmanager
    def stage(self, name):
        now = time.perf_counter()
        if self._stack:  # pause the enclosing stage
            outer, since = self._stack[-1]
            self.seconds[outer] += now - since
        self._stack.append((name, now))
        try:
            yield
        finally:
            end = time.perf_counter()
            _, since = self._stack.pop()
            self.seconds[name] += end - since
            if self._stack:
                outer, _ = self._stack[-1]
                self._stack[-1] = (outer, end)

    def wrap(self, obj, attr, name):
        """Times ``obj.attr`` (a method or module attribute) as stage ``name``; returns an undo function."""
        original = getattr(obj, attr)

        def timed(*args, **kwargs):
            with self.stage(name):
                return original(*args, **kwargs)

        setattr(obj, attr, timed)
        return lambda: setattr(obj, attr, original)

    def reset(self):
        self.seconds.clear()


def _ensure_data(data):
    if not os.path.isfile(os.path.join(data, "annotations", "instances_val2017.json")):
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_synthetic_coco.py"), "--out", data,
                        "--train", "600", "--val", "100", "--seed", "0"], check=True)


def _table(title, seconds, total, per, unit):
    rows = [f"### {title}", "", f"| stage | ms per {unit} | share |", "|---|---:|---:|"]
    other = total - sum(seconds.values())
    items = sorted(seconds.items(), key=lambda kv: -kv[1]) + [("other (Python glue, loss sum, bookkeeping)", other)]
    for name, s in items:
        rows.append(f"| {name} | {1000 * s / per:.1f} | {100 * s / max(total, 1e-9):.0f} % |")
    rows.append(f"| **total** | **{1000 * total / per:.1f}** | 100 % |")
    return "\n".join(rows)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iters", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--data", default=os.path.join(ROOT, "datasets", "synthetic"))
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: as the demo, config_CPU.sh)")
    p.add_argument("--no-eval", action="store_true")
    p.add_argument("--weights", default="", help="start from this checkpoint of the demo model (a run with "
                   "SAVE_CHECKPOINTS True writes model_*.pth); with --iters 0, profile its evaluation only")
    from maskrcnn_benchmark.cli.common import parse_with_overrides

    args, args.opts = parse_with_overrides(p, argv)  # KEY VALUE config overrides, anywhere
    _ensure_data(args.data)

    import torch

    from maskrcnn_benchmark.config import load_config
    from maskrcnn_benchmark.data import make_data_loader
    from maskrcnn_benchmark.data.build import make_device_loader
    from maskrcnn_benchmark.engine.hooks import MetricsHook
    from maskrcnn_benchmark.engine.resolve import resolve
    from maskrcnn_benchmark.engine.trainer import HookBase, Trainer, iterations_per_epoch
    from maskrcnn_benchmark.evaluation import COCOEvaluator, run_inference
    from maskrcnn_benchmark.evaluation.scoring import COCOScorer
    from maskrcnn_benchmark.modeling import build_detection_model
    from maskrcnn_benchmark.modeling.roi_heads.box_head import loss as box_loss
    from maskrcnn_benchmark.modeling.roi_heads.mask_head import mask_head as mask_module
    from maskrcnn_benchmark.solver import make_lr_scheduler, make_optimizer
    from maskrcnn_benchmark.utils.amp import make_grad_scaler
    from maskrcnn_benchmark.utils.host_memory import keep_freed_blocks

    if args.threads:
        torch.set_num_threads(args.threads)
    # the timer around optimizer.step makes the LR scheduler think the step was replaced: it was not
    warnings.filterwarnings("ignore", message="Seems like `optimizer.step()` has been overridden")
    device = torch.device("cpu")
    keep_freed_blocks()  # as the run does on the CPU
    cfg = resolve(load_config(CONFIG, ["DATASETS.DATA_DIR", args.data] + args.opts), device, 1)
    torch.manual_seed(1)
    model = build_detection_model(cfg).to(device)
    if args.weights:
        from maskrcnn_benchmark.utils.checkpoint import DetectronCheckpointer
        DetectronCheckpointer(cfg, model).load_weights(args.weights)
    optimizer = make_optimizer(cfg, model)
    scheduler = make_lr_scheduler(cfg, optimizer)
    scaler = make_grad_scaler(device, cfg.DTYPE)
    train_loader = make_device_loader(cfg, make_data_loader(cfg, is_train=True, num_replicas=1, rank=0, seed=1),
                                      device)
    ipe = iterations_per_epoch(len(train_loader.dataset), cfg.SOLVER.IMS_PER_BATCH)

    watch = Stopwatch()

    class TimedLoader:
        dataset = train_loader.dataset

        def __iter__(self):
            it = iter(train_loader)
            while True:
                with watch.stage("loader wait (decode, resize, collate, to device)"):
                    try:
                        batch = next(it)
                    except StopIteration:
                        return
                yield batch

    hooks = [MetricsHook(20, reduce=False)]
    total_iters = args.warmup + args.iters
    trainer = Trainer(model, optimizer, scheduler, TimedLoader(), device, total_iters, ipe, dtype=cfg.DTYPE,
                      hooks=hooks, clip_grad_norm=cfg.SOLVER.CLIP_GRAD_NORM, scaler=scaler)
    box, mask = model.roi_heads.box, model.roi_heads.mask
    undo = [
        watch.wrap(model.backbone, "forward", "backbone (ResNet + FPN)"),
        watch.wrap(model.rpn, "forward", "RPN + proposals (anchors, head, decode, NMS, RPN loss)"),
        watch.wrap(box.loss_evaluator, "subsample", "box sampling (match, sample)"),
        watch.wrap(box.feature_extractor, "forward", "box head (ROIAlign, MLP, predictor, loss)"),
        watch.wrap(box.predictor, "forward", "box head (ROIAlign, MLP, predictor, loss)"),
        watch.wrap(box_loss.FastRCNNLossComputation, "__call__", "box head (ROIAlign, MLP, predictor, loss)"),
        watch.wrap(mask_module, "batch_mask_targets", "mask targets (rasterize polygons)"),
        watch.wrap(mask.feature_extractor, "forward", "mask head (ROIAlign, convs, predictor, loss)"),
        watch.wrap(mask.predictor, "forward", "mask head (ROIAlign, convs, predictor, loss)"),
        watch.wrap(mask_module, "mask_rcnn_loss", "mask head (ROIAlign, convs, predictor, loss)"),
        watch.wrap(torch.Tensor, "backward", "backward"),
        watch.wrap(optimizer, "step", "optimizer (clip, SGD, LR)"),
        watch.wrap(optimizer, "zero_grad", "optimizer (clip, SGD, LR)"),
        watch.wrap(torch.nn.utils, "clip_grad_norm_", "optimizer (clip, SGD, LR)"),
        watch.wrap(scheduler, "step", "optimizer (clip, SGD, LR)"),
    ]
    for h in hooks:
        undo.append(watch.wrap(h, "after_step", "hooks and logging"))
        undo.append(watch.wrap(h, "before_step", "hooks and logging"))

    class Clock:  # the timed window: after the warm-up iterations
        start = None

    def after_step():
        if trainer.iter == args.warmup:
            watch.reset()
            Clock.start = time.perf_counter()

    class WarmupHook(HookBase):
        def after_step(self):
            after_step()

    trainer.hooks.append(WarmupHook())
    print(f"demo_profile: torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cores; "
          f"{args.iters} iterations of {cfg.SOLVER.IMS_PER_BATCH} images after {args.warmup} warm-up ones"
          + (f", from {args.weights}" if args.weights else "") + "\n")
    if args.iters:
        if args.warmup == 0:
            Clock.start = time.perf_counter()
        trainer.train()
        train_total = time.perf_counter() - Clock.start
        images = args.iters * cfg.SOLVER.IMS_PER_BATCH
        print(_table(f"one training iteration ({images / train_total:.1f} img/s)", dict(watch.seconds),
                     train_total, args.iters, "iteration"))
    if args.no_eval:
        return 0

    test_loader = make_device_loader(cfg, make_data_loader(cfg, is_train=False, num_replicas=1, rank=0)[0], device,
                                     is_train=False)
    test_set = test_loader.dataset
    evaluator = COCOEvaluator(test_set, scorer=None, mask_method=cfg.TEST.MASK_ENCODING)

    class TimedTestLoader:
        dataset = test_set

        def __len__(self):
            return len(test_loader)

        def __iter__(self):
            it = iter(test_loader)
            while True:
                with watch.stage("loader wait"):
                    try:
                        batch = next(it)
                    except StopIteration:
                        return
                yield batch

    undo += [
        watch.wrap(type(box.post_processor), "__call__", "box post-processing (decode, per-class NMS, top-k)"),
        watch.wrap(evaluator, "process", "detections to COCO (paste masks, RLE, to host)"),
    ]
    watch.reset()
    t = time.perf_counter()
    run_inference(model, TimedTestLoader(), evaluator, device, cfg.DTYPE)
    blocking = time.perf_counter() - t
    eval_seconds = dict(watch.seconds)
    detections = evaluator.gather()
    scorer = COCOScorer.for_dataset(test_set, backend=cfg.TEST.COCO_BACKEND, workers=cfg.TEST.COCO_WORKERS)
    t = time.perf_counter()
    scores = scorer(detections)
    scoring = time.perf_counter() - t
    for u in undo:
        u()
    print()
    print(_table(f"one evaluation of {len(test_set)} images: blocking {blocking:.2f} s "
                 f"({1000 * blocking / len(test_set):.1f} ms per image)", eval_seconds, blocking, 1, "evaluation"))
    print(f"\nCOCO scoring (a run's background process; here in-process, after the blocking part): {scoring:.2f} s "
          f"({len(detections)} detections; box AP {scores['bbox']['stats']['AP']:.3f}, mask AP "
          f"{scores['segm']['stats']['AP']:.3f} after {total_iters} iterations"
          + (f" from {args.weights}" if args.weights else "") + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
