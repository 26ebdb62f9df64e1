#!/usr/bin/env python
"""What feeding the training costs on the host, per core, and on the device, per batch.

Writes COCO-sized JPEGs (640x480 / 480x640, quality 90, 7 polygon instances each;
``maskrcnn_benchmark.synthetic.coco_like``) and measures, in this one process on one thread, taking turns so
that every row sees the same machine load:

* decode only: ``torchvision.io.decode_jpeg`` of the files' bytes (already in memory);
* the hybrid path's host side: ``COCODataset(hybrid=True)[i]`` (read, header checks, decode, annotations, the
  targets resized and flipped) and the batch collation into a ``uint8`` RawImageBatch;
* the reference path: ``COCODataset(hybrid=False)[i]`` (PIL decode and resize to the MLPerf size, flip,
  normalized float) and ``to_image_list``;
* other decoders when installed (PIL, simplejpeg, PyTurboJPEG, NVIDIA DALI's CPU decoder), for the choice;

then the device side: ``DeviceTransform`` (resize to 800x1066, flip, normalize, pad) of batches of 8, in ms per
batch on ``--device``, and the bytes per image that cross to the device on each path; and what receiving the
hybrid batches costs the training process: a forked process sends them over torch's multiprocessing queue, as a
DataLoader worker does (each storage of a batch is one shared-memory handover: a file descriptor passed over a
socket, then mapped), and this process times taking them off the queue once they are all sent.

    python bench/input_pipeline.py [--images 120] [--device cpu|cuda] [--rounds 3]

Last line: ``input: host <H> img/s/core, decode-only <D> img/s/core, ratio <H/D>, reference path <R> img/s/core``.
"""
import argparse
import statistics
import sys
import tempfile
import time

import torch

from maskrcnn_benchmark.config import get_cfg
from maskrcnn_benchmark.data.collate_batch import BatchCollator
from maskrcnn_benchmark.data.datasets import COCODataset
from maskrcnn_benchmark.data.transforms import build_transforms
from maskrcnn_benchmark.data.transforms.device import DeviceTransform
from maskrcnn_benchmark.structures.packing import handed_over_storages
from maskrcnn_benchmark.synthetic.coco_like import write_coco_like
from maskrcnn_benchmark.utils.processes import keep_freed_memory

BATCH = 8


def _mlperf_cfg():
    cfg = get_cfg()  # NVIDIA's defaults: 800 / 1333, BGR255 Caffe2 means, flip 0.5
    cfg.DATALOADER.SIZE_DIVISIBILITY = 32
    return cfg


def _rate(fn, items, size=lambda item: 1):
    """Per second: ``size(item)`` summed over the items ``fn`` took (images of batches: ``size=len``)."""
    t0 = time.perf_counter()
    for i in items:
        fn(i)
    return sum(size(i) for i in items) / (time.perf_counter() - t0)


def _send(queue, batches, received):
    for b in batches:
        queue.put(b)
    received.wait(600)  # the handovers need the sender alive until they are taken


def _handover_ms(batches, rounds):
    """Median ms per batch to take collated batches off a torch multiprocessing queue, sent by a forked process."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("fork")
    per_batch = []
    for _ in range(rounds):
        queue, received = ctx.Queue(), ctx.Event()
        sender = ctx.Process(target=_send, args=(queue, batches, received), daemon=True)
        sender.start()
        first = queue.get()  # the sender is running; let it put the rest
        time.sleep(1.0)
        t0 = time.perf_counter()
        got = [queue.get() for _ in batches[1:]]
        per_batch.append(1000 * (time.perf_counter() - t0) / max(len(got), 1))
        received.set()
        sender.join(60)
        del first, got
    return statistics.median(per_batch)


def _other_decoders():
    out = {}
    try:
        import io

        from PIL import Image

        out["PIL (open + RGB)"] = lambda data: Image.open(io.BytesIO(data)).convert("RGB")
    except ImportError:
        pass
    try:
        import simplejpeg

        out["simplejpeg"] = lambda data: simplejpeg.decode_jpeg(data, colorspace="RGB")
    except ImportError:
        pass
    try:
        from turbojpeg import TurboJPEG

        jpeg = TurboJPEG()
        out["PyTurboJPEG"] = lambda data: jpeg.decode(data)
    except (ImportError, RuntimeError, OSError):
        pass
    try:
        import numpy as np
        from nvidia.dali import fn as dali_fn
        from nvidia.dali import pipeline_def, types

        @pipeline_def(batch_size=1, num_threads=1, device_id=None, exec_async=False, exec_pipelined=False,
                      prefetch_queue_depth=1)
        def _decode():
            jpegs = dali_fn.external_source(name="jpegs", dtype=types.UINT8)
            return dali_fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)

        pipe = _decode()
        pipe.build()

        def dali(data):
            pipe.feed_input("jpegs", [np.frombuffer(data, dtype=np.uint8)])
            return pipe.run()

        out["NVIDIA DALI (CPU)"] = dali
    except Exception:  # noqa: BLE001 - optional, and DALI raises many kinds when it cannot run here
        pass
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=120)
    p.add_argument("--rounds", type=int, default=3, help="turns of every measurement (the median is reported)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dir", default=None, help="where to write the images (default: a temporary folder)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    keep_freed_memory()  # what every loader worker does (its _worker_init)
    from torchvision.io import decode_jpeg

    cfg = _mlperf_cfg()
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        image_dir, ann_file = write_coco_like(root, num_images=args.images, seed=0)
        reference = COCODataset(ann_file, image_dir, True, build_transforms(cfg, True))
        hybrid = COCODataset(ann_file, image_dir, True, build_transforms(cfg, True), hybrid=True)
        blobs = []
        for i in range(len(reference)):
            with open(reference.image_path(i), "rb") as f:
                blobs.append(f.read())
        tensors = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]
        collate = BatchCollator(32)
        # batches of one orientation, as aspect-ratio grouping makes them
        items = sorted([(i, 7 + i) for i in range(len(reference))], key=lambda item: item[0] % 2)
        batches = [items[k:k + BATCH] for k in range(0, len(items), BATCH)]

        def host_hybrid(batch):
            collate([hybrid[i] for i in batch])

        def host_reference(batch):
            collate([reference[i] for i in batch])

        others = _other_decoders()
        rates = {"decode": [], "hybrid": [], "reference": []}
        rates.update({name: [] for name in others})
        for _ in range(args.rounds):
            rates["decode"].append(_rate(decode_jpeg, tensors))
            rates["hybrid"].append(_rate(host_hybrid, batches, size=len))  # the last batch may be partial
            rates["reference"].append(_rate(host_reference, batches, size=len))
            for name, fn in others.items():
                rates[name].append(_rate(fn, blobs))
        med = {k: statistics.median(v) for k, v in rates.items()}

        device = torch.device(args.device)
        transform = DeviceTransform.from_config(cfg)
        raw_batches = [collate([hybrid[i] for i in batch]) for batch in batches if len(batch) == BATCH]
        raw_batches = [b[0].to(device) for b in raw_batches]
        ms = []
        for rnd in range(args.rounds + 1):
            for raw in raw_batches:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                out = transform(raw)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                if rnd:  # the first round warms up
                    ms.append(1000 * (time.perf_counter() - t0))
        out_shape = tuple(out.tensors.shape)
        host_batches = [collate([hybrid[i] for i in batch]) for batch in batches if len(batch) == BATCH]
        storages = handed_over_storages(host_batches[0])
        receive_ms = _handover_ms(host_batches, args.rounds)
        raw_bytes = statistics.mean(b.tensors.numel() for b in raw_batches) / BATCH
        ref_bytes = statistics.mean(collate([reference[i] for i in batch])[0].tensors.numel() * 4
                                    for batch in batches[:3]) / BATCH

    print(f"{args.images} COCO-sized JPEGs (640x480 / 480x640, q90, 7 instances), MLPerf training transforms "
          f"(800/1333, flip 0.5), one thread, median of {args.rounds} turns")
    print("| host work, per core | img/s | / decode only |\n|---|---:|---:|")
    print(f"| decode only (torchvision.io.decode_jpeg, bytes in memory) | {med['decode']:.1f} | 1.00 |")
    print(f"| hybrid path, host side (read, check, decode, targets, collate) | {med['hybrid']:.1f} | "
          f"{med['hybrid'] / med['decode']:.2f} |")
    print(f"| reference path (PIL decode + resize, flip, normalize, collate) | {med['reference']:.1f} | "
          f"{med['reference'] / med['decode']:.2f} |")
    for name in others:
        print(f"| decoder: {name} | {med[name]:.1f} | {med[name] / med['decode']:.2f} |")
    print(f"\n| device side ({device}) | value |\n|---|---:|")
    print(f"| DeviceTransform, batch of {BATCH} to {out_shape[2]}x{out_shape[3]} (resize, flip, normalize, pad) | "
          f"{statistics.median(ms):.1f} ms |")
    print(f"| host-to-device bytes per image, hybrid (uint8 as decoded, padded to the batch's largest image) | "
          f"{raw_bytes / 1e6:.2f} MB |")
    print(f"| host-to-device bytes per image, reference (float32, resized) | {ref_bytes / 1e6:.2f} MB |")
    print(f"| training process: shared-memory handovers per hybrid batch of {BATCH} (images and targets) | "
          f"{storages} |")
    print(f"| training process: receiving one such batch from a loader worker | {receive_ms:.2f} ms |")
    print(f"input: host {med['hybrid']:.1f} img/s/core, decode-only {med['decode']:.1f} img/s/core, "
          f"ratio {med['hybrid'] / med['decode']:.2f}, reference path {med['reference']:.1f} img/s/core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
