#!/usr/bin/env python
"""The demo model's training step and inference at a fixed state, for comparing two versions of the code.

    python bench/demo_step.py [--data datasets/synthetic] [--batches 12] [--repeats 3]

``bench/demo_profile.py`` profiles the demo as it trains; but a demo iteration's cost depends on where training is
(early on every image has the sampler's full positive budget of mask-head rows, later fewer), so two versions of
the code that train along slightly different paths cannot be compared that way. Here the weights stay fixed (SGD
with learning rate 0: forward, backward and the optimizer step all run, nothing changes): the demo's config and
dataset (configs/e2e_mask_rcnn_synthetic_cpu.yaml; tools/make_synthetic_coco.py --train 600 --val 100 --seed 0),
its model at initialization (seed 1), ``--batches`` batches of 4 images timed ``--repeats`` times, then inference
of one batch (the untrained model gives each image the config's 100 detections: the most post-processing and
mask-head work an evaluation can have). Prints ms per iteration (each repeat) and ms per inference batch.
"""
import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=os.path.join(ROOT, "datasets", "synthetic"))
    p.add_argument("--batches", type=int, default=12)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    if not os.path.isfile(os.path.join(args.data, "annotations", "instances_val2017.json")):
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_synthetic_coco.py"), "--out", args.data,
                        "--train", "600", "--val", "100", "--seed", "0"], check=True)
    import torch

    from maskrcnn_benchmark.config import load_config
    from maskrcnn_benchmark.data import make_data_loader
    from maskrcnn_benchmark.data.build import make_device_loader
    from maskrcnn_benchmark.engine.resolve import resolve
    from maskrcnn_benchmark.modeling import build_detection_model

    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    cfg = resolve(load_config(os.path.join(ROOT, "configs", "e2e_mask_rcnn_synthetic_cpu.yaml"),
                              ["DATASETS.DATA_DIR", args.data, "DATALOADER.NUM_WORKERS", "0"]), device, 1)
    torch.manual_seed(1)
    model = build_detection_model(cfg).to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    batches = iter(make_device_loader(cfg, make_data_loader(cfg, is_train=True, num_replicas=1, rank=0, seed=1),
                                      device))
    warm = [next(batches) for _ in range(3)]
    timed = [next(batches) for _ in range(args.batches)]

    def step(batch):
        images, targets, _ = batch
        loss = sum(model(images, targets).values())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    for b in warm:
        step(b)
    train = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        for b in timed:
            step(b)
        train.append(1000 * (time.perf_counter() - t) / len(timed))
    model.eval()
    with torch.no_grad():
        images = timed[0][0]
        model(images)
        t = time.perf_counter()
        out = model(images)
        infer = 1000 * (time.perf_counter() - t)
    print(f"demo_step: torch {torch.__version__}, {torch.get_num_threads()} threads, fixed weights (seed 1)\n")
    print("| what | ms |")
    print("|---|---:|")
    print(f"| training iteration, 4 images (each of {args.repeats} repeats of {len(timed)} batches) | "
          f"{' / '.join(f'{x:.0f}' for x in train)} |")
    print(f"| inference, 4 images, {sum(len(o) for o in out)} detections | {infer:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
