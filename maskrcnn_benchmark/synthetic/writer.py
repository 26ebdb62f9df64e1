"""Writing the synthetic dataset in the COCO 2017 layout: images first (each atomically), each split's
annotation file last, so an interrupted run never leaves annotations that do not match the images."""
import io
import json
import os
import sys
import time

import numpy as np

from ..utils.fileio import write_bytes, write_text
from .scenes import CATEGORIES, DEFAULT_SIZE, SHAPES_PER_IMAGE, SPLITS, _normalize_sizes, generate_image

DEFAULT_TRAIN = 600
DEFAULT_VAL = 100
MAX_IMAGES = 999_999            # per split; keeps the id ranges of the two splits disjoint
JPEG_QUALITY = 90

MARKER = "maskrcnn_benchmark synthetic shapes"   # in info.description, and the name of the directory marker
_MARKER_FILE = ".maskrcnn_benchmark_synthetic"


class _Progress:
    """One-line progress bar on stderr, only when stderr is a terminal (or a callable ``fn(split, done, total)``)."""

    def __init__(self, progress):
        self.fn = progress if callable(progress) else None
        self.bar = self.fn is None and progress is not False and _isatty(sys.stderr)
        self.last = 0.0

    def update(self, split, done, total):
        if self.fn is not None:
            self.fn(split, done, total)
            return
        if not self.bar:
            return
        now = time.monotonic()
        if done < total and now - self.last < 0.1:
            return
        self.last = now
        width = 30
        fill = int(width * done / max(total, 1))
        sys.stderr.write(f"\r{split:5s} [{'#' * fill}{'.' * (width - fill)}] {done}/{total}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _isatty(stream):
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _is_ours(json_path):
    try:
        with open(json_path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return MARKER.encode() in head


def _written_before(out_dir):
    """The image paths (relative to ``out_dir``) this generator has written there and not removed, from its
    marker file: the only files it ever deletes. None without a marker."""
    try:
        with open(os.path.join(out_dir, _MARKER_FILE)) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    return {ln for ln in lines[1:] if ln}


def _image_file(split, i):
    """``(image id, file name)`` of image ``i`` of ``split``: COCO's naming, the id in 12 digits."""
    image_id = SPLITS[split][2] + i
    return image_id, f"{image_id:012d}.jpg"


def _record_written(out_dir, names):
    write_text(os.path.join(out_dir, _MARKER_FILE),
               f"{MARKER}: written by maskrcnn_benchmark.synthetic; the images it wrote:\n"
               + "".join(f"{n}\n" for n in sorted(names)), what="generator's marker", fsync=False)


def _check_out_dir(out_dir, force):
    """Create ``out_dir`` (and the three sub-folders); refuse to write over a dataset this module did not make:
    an annotation file without the generator's mark (whatever the folder's marker says: COCO may have been
    unpacked there since), or images in a folder without its marker. Returns ``(out_dir, written)``: the images
    it wrote there before (:func:`_written_before`)."""
    if not isinstance(out_dir, (str, os.PathLike)) or not str(out_dir):
        raise ValueError(f"output directory must be a path, got {out_dir!r}")
    out_dir = os.fspath(out_dir)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ValueError(f"output path '{out_dir}' exists and is not a directory")
    written = _written_before(out_dir)
    if not force:
        foreign = []
        for split, (name, *_rest) in SPLITS.items():
            ann = os.path.join(out_dir, "annotations", f"instances_{name}.json")
            if os.path.exists(ann) and not _is_ours(ann):
                foreign.append(ann)
            img_dir = os.path.join(out_dir, name)
            if written is None and os.path.isdir(img_dir):
                with os.scandir(img_dir) as it:
                    if any(e.name.lower().endswith(".jpg") for e in it):
                        foreign.append(img_dir)
        if foreign:
            raise ValueError(f"'{out_dir}' already holds a dataset not made by this generator ({foreign[0]}); "
                             "refusing to write over it (use force=True / --force)")
    try:
        for sub in ["annotations"] + [v[0] for v in SPLITS.values()]:
            os.makedirs(os.path.join(out_dir, sub), exist_ok=True)
        probe = os.path.join(out_dir, f".write_test{os.getpid()}")
        with open(probe, "wb"):
            pass
        os.unlink(probe)
    except OSError as e:
        raise OSError(e.errno, f"cannot write to output directory '{out_dir}': {e.strerror or e}") from None
    return out_dir, written or set()


def _split_json(split, seed, sizes, records):
    name, _code, _first_img, first_ann = SPLITS[split]
    images, annotations = [], []
    ann_id = first_ann
    for image_id, file_name, width, height, objects in records:
        images.append({"id": image_id, "file_name": file_name, "width": width, "height": height, "license": 1})
        for o in objects:
            annotations.append({"id": ann_id, "image_id": image_id, "category_id": o["category_id"],
                                "segmentation": o["segmentation"], "area": o["area"], "bbox": o["bbox"],
                                "iscrowd": 0})
            ann_id += 1
    doc = {
        "info": {"description": f"{MARKER} ({name})", "version": "1.0", "year": 2024,
                 "contributor": "maskrcnn_benchmark.synthetic", "date_created": "",
                 "seed": int(seed), "split": split, "image_sizes": [list(s) for s in sizes]},
        "licenses": [{"id": 1, "name": "CC0 1.0", "url": "https://creativecommons.org/publicdomain/zero/1.0/"}],
        "images": images,
        "annotations": annotations,
        "categories": [dict(c) for c in CATEGORIES],
    }
    return json.dumps(doc, separators=(",", ":")).encode() + b"\n"


def _validate_count(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if not 0 <= value <= MAX_IMAGES:
        raise ValueError(f"{name} must be between 0 and {MAX_IMAGES}, got {value}")
    return int(value)


def make_synthetic_coco(out_dir, num_train=DEFAULT_TRAIN, num_val=DEFAULT_VAL, image_size=DEFAULT_SIZE, seed=0,
                        progress=None, force=False):
    """Write the synthetic dataset under ``out_dir`` (COCO 2017 layout) and return a summary dict.

    ``image_size``: ``(W, H)`` or a list of ``(W, H)`` (each image picks one at random).  ``progress``: ``None``
    or ``True`` — a one-line bar on stderr only when stderr is a terminal; ``False`` — nothing; a callable —
    called as ``progress(split, done, total)``.  ``force``: write even into a directory that holds a dataset
    this generator did not make (its colliding files are overwritten, its other files kept).

    Each split's images are written first (each file atomically) and its annotation file last, via a temporary
    file and ``os.replace``; an existing annotation file of the split is removed before its images are
    rewritten, so an interrupted run never leaves an annotation file that does not match the images.  The images
    of an earlier, larger run are removed: those the folder's marker file records as this generator's, never
    another file.

    Returns ``{"out_dir", "seconds", "train": {...}, "val": {...}}`` with per split ``images``, ``annotations``,
    ``image_dir``, ``ann_file``, ``objects_per_image`` (histogram list), ``occluded`` (annotated shapes whose
    visible area is more than 2 % smaller than their full area: occluded or cut by the image border).
    """
    num_train = _validate_count("num_train", num_train)
    num_val = _validate_count("num_val", num_val)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    sizes = _normalize_sizes(image_size)
    out_dir, written = _check_out_dir(out_dir, force)
    # recorded before they are written: an interrupted run's images are known to the next one
    written |= {f"{SPLITS[split][0]}/{_image_file(split, i)[1]}"
                for split, total in (("train", num_train), ("val", num_val)) for i in range(total)}
    _record_written(out_dir, written)

    bar = _Progress(progress)
    t0 = time.monotonic()
    summary = {"out_dir": out_dir}
    for split, total in (("train", num_train), ("val", num_val)):
        name = SPLITS[split][0]
        img_dir = os.path.join(out_dir, name)
        ann_file = os.path.join(out_dir, "annotations", f"instances_{name}.json")
        if os.path.exists(ann_file):
            os.unlink(ann_file)
        records, hist, occluded, n_ann = [], [0] * (SHAPES_PER_IMAGE[1] + 1), 0, 0
        bar.update(split, 0, total)
        for i in range(total):
            sample = generate_image(seed, split, i, sizes)
            image_id, file_name = _image_file(split, i)
            buf = io.BytesIO()
            sample["image"].save(buf, format="JPEG", quality=JPEG_QUALITY)
            write_bytes(os.path.join(img_dir, file_name), buf.getvalue(), what="image", fsync=False)
            objs = sample["objects"]
            records.append((image_id, file_name, sample["width"], sample["height"], objs))
            hist[len(objs)] += 1
            n_ann += len(objs)
            occluded += sum(int(o["visible_mask"].sum()) < 0.98 * int(o["full_mask"].sum()) for o in objs)
            for o in objs:      # keep memory flat: masks are not needed any more
                del o["visible_mask"], o["full_mask"]
            bar.update(split, i + 1, total)
        keep = {f"{name}/{r[1]}" for r in records}
        stale = {n for n in written if n.startswith(name + "/") and n not in keep}  # its images of a larger run
        for n in sorted(stale):
            try:
                os.unlink(os.path.join(out_dir, n))
            except FileNotFoundError:
                pass
        written -= stale
        _record_written(out_dir, written)
        write_bytes(ann_file, _split_json(split, seed, sizes, records), what="annotation file")
        summary[split] = {"images": total, "annotations": n_ann, "image_dir": img_dir, "ann_file": ann_file,
                          "objects_per_image": hist, "occluded": occluded}
    summary["seconds"] = time.monotonic() - t0
    return summary
