"""COCO-format detection dataset (pycocotools), with the reference's filtering and contiguous class ids."""
import contextlib
import io
import json
import logging
import math
import os
import random
import warnings

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from ...structures.bounding_box import BoxList
from ...structures.image_list import RawImage
from ...utils.errors import DatasetError
from ...structures.segmentation_mask import SegmentationMask
from ..catalog import check_categories, read_categories  # noqa: F401 (read_categories: the datasets' name for it)

logger = logging.getLogger(__name__)


def has_valid_annotation(anno):
    """The reference's training-image filter: at least one annotation (crowd regions count) whose box is more
    than 1 pixel wide and high."""
    return any(a["bbox"][2] > 1 and a["bbox"][3] > 1 for a in anno)


def _instances(anno):
    """The annotations an image trains on: the non-crowd ones (crowd regions are ignored, as in the reference);
    boxes left empty after clipping to the image are dropped later."""
    return [a for a in anno if not a.get("iscrowd", 0)]


def _non_finite(values):
    return any(not isinstance(v, (int, float)) or not math.isfinite(v) for v in values)


_NUMBER = (int, float)  # what json gives numbers as (bool and str are not numbers here)
# the hybrid path's images that torchvision decodes to PIL's bytes (tests/data/test_hybrid_pipeline.py); any other
# format or mode is decoded by PIL
_FAST_FORMATS = ("JPEG", "PNG", "WEBP", "GIF")
_EIGHT_BIT_MODES = ("1", "L", "LA", "P", "PA", "RGB", "RGBA", "CMYK", "YCbCr")


def _finite_box(bbox):
    """Four finite floats (an integer beyond a float's range is not one either)."""
    try:
        return math.isfinite(bbox[0]) and math.isfinite(bbox[1]) and math.isfinite(bbox[2]) and \
            math.isfinite(bbox[3])
    except OverflowError:
        return False


def _has_id(x):
    return type(x.get("id")) is int


def _invalid_polygon(seg):
    """The first part of a polygon list that is not a list of an even number of coordinates (parts of fewer
    than 3 points are dropped later, whatever their parity, as the reference drops them), else None."""
    for p in seg:
        if not isinstance(p, list) or (len(p) >= 6 and len(p) % 2):
            return p
    return None


def _check_annotations(data, ann_file, has_constants, scored=False):
    """Every image, annotation and category has an id, every image its size, every annotation a known image
    and category, finite box coordinates and a segmentation (an RLE: its 'counts' and 'size'); and, in a ``scored``
    set (evaluation), the 'area' and 'iscrowd' pycocotools' COCOeval reads from every annotation; one line
    otherwise, when the dataset is built (not as a KeyError in pycocotools' index, the loader's aspect grouping, a
    loader worker or the scoring an epoch in).
    Polygon coordinates are scanned only when the file holds a NaN/Infinity literal (the only way a JSON writer
    puts a non-finite number in a file): COCO train has 40 M of them."""
    if not isinstance(data, dict) or not isinstance(data.get("images"), list) \
            or not isinstance(data.get("annotations", []), list) or not isinstance(data.get("categories"), list):
        raise DatasetError(f"annotation file '{ann_file}' is not COCO instances json (no images/annotations/"
                           "categories lists)")
    for what in ("images", "annotations", "categories"):
        bad = next((x for x in data.get(what, []) if not isinstance(x, dict)), None)
        if bad is not None:
            raise DatasetError(f"annotation file '{ann_file}' has an entry of '{what}' that is not an object: "
                               f"{bad!r:.80}")
    for i in data["images"]:
        if not isinstance(i.get("file_name"), str) or not i["file_name"]:
            raise DatasetError(f"image {i.get('id')!r} in '{ann_file}' has no file_name")
        if not _has_id(i):
            raise DatasetError(f"image '{i['file_name']}' in '{ann_file}' has no integer id")
        w, h = i.get("width"), i.get("height")
        if type(w) not in _NUMBER or type(h) not in _NUMBER or not (w >= 1 and h >= 1):
            raise DatasetError(f"image {i['id']} in '{ann_file}' has no width and height of at least 1 pixel: "
                               f"{w}x{h}")
    check_categories(data["categories"], ann_file)
    cats = {c["id"] for c in data["categories"]}
    images = {i["id"]: i for i in data["images"]}
    for a in data.get("annotations", []):
        aid = a.get("id")
        if type(aid) is not int:
            raise DatasetError(f"an annotation of image {a.get('image_id')!r} in '{ann_file}' has no integer id")
        if a.get("category_id") not in cats:
            raise DatasetError(f"annotation {aid} in '{ann_file}' has category_id {a.get('category_id')!r}, which "
                               f"is not in the file's categories ({', '.join(map(str, sorted(cats)))})")
        if a.get("image_id") not in images:
            raise DatasetError(f"annotation {aid} in '{ann_file}' refers to image_id {a.get('image_id')!r}, which "
                               "is not in the file's images")
        bbox = a.get("bbox")
        if not isinstance(bbox, (list, tuple)) or len(bbox) != 4 or not (  # numbers (unrolled: COCO has 860k)
                type(bbox[0]) in _NUMBER and type(bbox[1]) in _NUMBER and type(bbox[2]) in _NUMBER
                and type(bbox[3]) in _NUMBER) or not _finite_box(bbox):  # 1e999 parses as inf
            raise DatasetError(f"annotation {aid} in '{ann_file}' has an invalid bbox {bbox!r} (4 finite numbers "
                               "[x, y, w, h] expected)")
        seg = a.get("segmentation")
        if isinstance(seg, list):
            bad = _invalid_polygon(seg)
            if bad is not None:
                raise DatasetError(f"annotation {aid} in '{ann_file}' has an invalid polygon ("
                                   + (f"{len(bad)} coordinates: x, y pairs expected)" if isinstance(bad, list)
                                      else f"{bad!r:.40}: a list of x, y coordinates expected)"))
            if has_constants and any(_non_finite(p) for p in seg):
                raise DatasetError(f"annotation {aid} in '{ann_file}' has a polygon with a non-finite coordinate")
        elif not isinstance(seg, dict):
            raise DatasetError(f"annotation {aid} in '{ann_file}' has no segmentation (polygons or RLE): "
                               f"{seg!r:.40}")
        elif "counts" not in seg or "size" not in seg:
            missing = " and ".join(f"'{k}'" for k in ("counts", "size") if k not in seg)
            raise DatasetError(f"annotation {aid} in '{ann_file}' has an RLE segmentation without {missing}: "
                               f"{seg!r:.60}")
        elif scored or not a.get("iscrowd", 0):  # decoded (training skips crowd regions) or scored
            image, size = images[a["image_id"]], seg["size"]
            if not isinstance(size, (list, tuple)) or list(size) != [image["height"], image["width"]]:
                raise DatasetError(f"annotation {aid} in '{ann_file}' has an RLE segmentation of size {size!r:.40}, "
                                   f"not its image's [{image['height']}, {image['width']}] (height, width)")
        if scored:
            for key in ("area", "iscrowd"):
                if not isinstance(a.get(key), _NUMBER):  # a bool iscrowd too (pycocotools: int())
                    raise DatasetError(f"annotation {aid} in '{ann_file}' has no '{key}' (a number), which COCO's "
                                       f"evaluation (pycocotools' COCOeval) reads from every annotation: "
                                       f"{a.get(key)!r:.40}")


def load_coco(ann_file, scored=False):
    """pycocotools' COCO of ``ann_file``, after checking every annotation (NaN and Infinity parse as numbers in
    Python's json: they would train on nothing, silently); ``scored``: also what COCO's evaluation reads."""
    from pycocotools.coco import COCO

    constants = []

    def constant(name):
        constants.append(name)
        return float(name.replace("Infinity", "inf"))

    try:
        with open(ann_file) as f:
            data = json.load(f, parse_constant=constant)
    except (OSError, ValueError) as e:
        raise DatasetError(f"annotation file '{ann_file}' is not valid COCO json: {e}") from None
    _check_annotations(data, ann_file, bool(constants), scored)
    coco = COCO()
    coco.dataset = data
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
    return coco


def _report_filter(coco, kept_ids, ann_file):
    """Say what the training filter removed, and warn when it is a large share (a broken file, not COCO's 1 %)."""
    anns = coco.dataset.get("annotations", [])
    if not anns:
        return
    crowd = sum(1 for a in anns if a.get("iscrowd", 0))
    tiny = sum(1 for a in anns if not a.get("iscrowd", 0) and not (a["bbox"][2] > 1 and a["bbox"][3] > 1))
    dropped_images = len(coco.imgs) - len(kept_ids)
    msg = (f"{ann_file}: training on {len(kept_ids)} of {len(coco.imgs)} images ({dropped_images} without a box "
           f"wider and higher than 1 px); of {len(anns)} annotations {crowd} are crowd regions (ignored) and "
           f"{tiny} have boxes of 1 px or less (dropped)")
    if (crowd + tiny) > 0.25 * len(anns) or dropped_images > 0.25 * len(coco.imgs):
        logger.warning("%s: a large share; check the annotation file", msg)
    else:
        logger.info(msg)


def missing_files(root, file_names):
    """The file names (relative to ``root``) that do not exist, in order. One directory listing per folder
    instead of a ``stat`` per file: COCO train's 118k images are one ``scandir`` of ``train2017`` (measured in
    docs/benchmarks.md), cheap on parallel file systems too."""
    present = {}
    missing = []
    for name in file_names:
        folder, base = os.path.split(name)
        if folder not in present:
            try:
                with os.scandir(os.path.join(root, folder)) as it:
                    present[folder] = {e.name for e in it}
            except OSError:
                present[folder] = set()
        if base not in present[folder]:
            missing.append(name)
    return missing


# An image larger than this (pixels) is refused as bad input: PIL's own decompression-bomb limit (89 Mpx; COCO's
# largest image is 0.4 Mpx). A file claiming more would take gigabytes to decode.
MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS or 89_478_485


def check_image_size(path, size_wh, info):
    """The image's header size must be the annotation's ``width``/``height`` (the boxes and polygons are in
    those coordinates) and at most MAX_IMAGE_PIXELS."""
    w, h = size_wh
    if w * h > MAX_IMAGE_PIXELS:
        raise DatasetError(f"image file '{path}' is {w}x{h}: a decompression bomb (over {MAX_IMAGE_PIXELS} pixels, "
                           "refused)")
    if "width" in info and "height" in info and (w, h) != (int(info["width"]), int(info["height"])):
        raise DatasetError(f"image file '{path}' is {w}x{h}, but its annotation (image id {info.get('id')}) says "
                           f"{info['width']}x{info['height']}")


class COCODataset(torch.utils.data.Dataset):
    """Images and instance annotations of a COCO json.

    In training, images without a usable annotation are removed. Category ids are mapped to contiguous labels
    ``1..K`` (0 is background) in the file's order of the categories, as the reference maps them;
    ``contiguous_category_id_to_json_id`` maps back for eval.
    ``__getitem__`` returns ``(image, BoxList target with labels and masks, index)``.
    """

    def __init__(self, ann_file, root, remove_images_without_annotations, transforms=None, hybrid=False):
        if not os.path.isfile(ann_file):
            raise DatasetError(f"annotation file '{ann_file}' does not exist")
        if not os.path.isdir(root):
            raise DatasetError(f"image folder '{root}' does not exist")
        # the reference's flag is is_train: a set that is not trained on is scored (the evaluation's keys checked)
        self.coco = load_coco(ann_file, scored=not remove_images_without_annotations)
        self.ann_file = ann_file
        self.root = root
        self.transforms = transforms
        self.hybrid = hybrid  # decode only; the device resizes, flips and normalizes (DATALOADER.HYBRID)
        ids = sorted(self.coco.imgs.keys())
        if remove_images_without_annotations:
            ids = [i for i in ids if has_valid_annotation(self.coco.imgToAnns.get(i, []))]
            _report_filter(self.coco, ids, ann_file)
        if not ids:
            raise DatasetError(f"dataset '{ann_file}' has no images"
                               + (" with usable annotations" if remove_images_without_annotations else ""))
        self.ids = ids
        # labels 1..K in the file's order of the categories, as the reference numbers them (pycocotools lists them
        # so; COCO's file is sorted by id)
        self.json_category_id_to_contiguous_id = {c: i + 1 for i, c in enumerate(self.coco.getCatIds())}
        self.contiguous_category_id_to_json_id = {v: k for k, v in self.json_category_id_to_contiguous_id.items()}
        self.id_to_img_map = dict(enumerate(self.ids))
        self._warned_degenerate = False
        self._check_files_exist()

    def _check_files_exist(self):
        """Every image of the dataset exists, checked when the dataset is built (before the first training
        iteration and the first evaluation), so a missing file is not found an epoch into the run."""
        names = [self.coco.imgs[i]["file_name"] for i in self.ids]
        missing = missing_files(self.root, names)
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise DatasetError(f"image file '{os.path.join(self.root, missing[0])}'{more} of '{self.ann_file}' "
                               "does not exist")

    def __len__(self):
        return len(self.ids)

    def get_img_info(self, index):
        return self.coco.imgs[self.ids[index]]

    def image_path(self, index):
        return os.path.join(self.root, self.coco.imgs[self.ids[index]]["file_name"])

    def _load_image(self, index):
        """The image as RGB (grayscale and CMYK converted); one DatasetError line naming the file when it is
        missing, corrupt, a decompression bomb, or of another size than its annotation says."""
        path = self.image_path(index)
        info = self.get_img_info(index)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                with Image.open(path) as img:
                    check_image_size(path, img.size, info)
                    img.load()
                    return img if img.mode == "RGB" else img.convert("RGB")
        except FileNotFoundError:
            raise DatasetError(f"image file '{path}' does not exist") from None
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
            raise DatasetError(f"image file '{path}' is a decompression bomb (refused): {e}") from None
        except (UnidentifiedImageError, OSError, SyntaxError) as e:
            raise DatasetError(f"image file '{path}' is corrupt or not an image: {e}") from None

    def _load_raw(self, index):
        """The hybrid path's image: the file's bytes decoded to ``uint8`` RGB, after the same header checks as
        :meth:`_load_image`. By torchvision (libjpeg-turbo; grayscale and CMYK converted) for a single-frame
        JPEG, PNG, WebP or GIF of 8-bit channels, the bytes PIL gives; anything else (16-bit PNG, BMP, TIFF, an
        animation) by PIL, as the reference reads it (``convert("RGB")``, the first frame)."""
        from torchvision.io import ImageReadMode, decode_image

        path = self.image_path(index)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise DatasetError(f"image file '{path}' does not exist") from None
        except OSError as e:
            raise DatasetError(f"image file '{path}' cannot be read: {e.strerror}") from None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                with Image.open(io.BytesIO(data)) as header:  # reads the header only
                    size = header.size
                    fast = (header.format in _FAST_FORMATS and header.mode in _EIGHT_BIT_MODES
                            and getattr(header, "n_frames", 1) == 1)
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
            raise DatasetError(f"image file '{path}' is a decompression bomb (refused): {e}") from None
        except (UnidentifiedImageError, OSError, SyntaxError) as e:
            raise DatasetError(f"image file '{path}' is corrupt or not an image: {e}") from None
        check_image_size(path, size, self.get_img_info(index))
        try:
            if fast:
                pixels = decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB)
                fast = pixels.dtype == torch.uint8 and pixels.dim() == 3  # a 16-bit RGB PNG comes as uint16
            if not fast:
                with Image.open(io.BytesIO(data)) as img:
                    img.load()
                    rgb = np.asarray(img if img.mode == "RGB" else img.convert("RGB"))
                pixels = torch.from_numpy(rgb.copy()).permute(2, 0, 1).contiguous()
        except (RuntimeError, ValueError, OSError, SyntaxError) as e:
            raise DatasetError(f"image file '{path}' is corrupt or not an image: {str(e).splitlines()[0]}") \
                from None
        return RawImage(pixels)

    def _segmentation(self, anno, width, height):
        """Polygons when every instance has them, else bitmaps (RLE instances decoded).

        As the reference, polygon parts with fewer than 3 points are dropped from their instance; an instance
        left with no part keeps an empty mask (its mask target is all background).
        """
        from pycocotools import mask as mask_utils

        polys, all_poly = [], True
        for a in anno:
            seg = a.get("segmentation")
            if isinstance(seg, list):
                parts = []
                for p in seg:
                    if isinstance(p, (list, tuple)) and len(p) < 6:
                        continue  # fewer than 3 points, whatever the parity: dropped, as the reference drops it
                    if not isinstance(p, (list, tuple)) or len(p) % 2 or \
                            not all(isinstance(v, (int, float)) for v in p):
                        raise DatasetError(f"annotation {a.get('id')} of image '{self.ann_file}' has an "
                                           "invalid polygon (needs an even number of numeric coordinates)")
                    parts.append(p)
                if not parts and not self._warned_degenerate:
                    logger.warning("%s: annotation %s has only degenerate polygons (< 3 points); its mask is "
                                   "empty", self.ann_file, a.get("id"))
                    self._warned_degenerate = True
                polys.append(parts)
            else:
                all_poly = False
                polys.append(seg)
        if all_poly:
            return SegmentationMask(polys, (width, height), mode="poly")
        bitmaps = []
        for a, seg in zip(anno, polys):
            if isinstance(seg, list):
                rles = mask_utils.frPyObjects(seg, height, width) if seg else []
                m = mask_utils.decode(mask_utils.merge(rles)) if rles else np.zeros((height, width), np.uint8)
            else:
                rle = mask_utils.frPyObjects(seg, height, width) if isinstance(seg.get("counts"), list) else seg
                m = mask_utils.decode(rle)
            bitmaps.append(m)
        masks = torch.from_numpy(np.stack(bitmaps)) if bitmaps else torch.zeros((0, height, width), dtype=torch.uint8)
        return SegmentationMask(masks, (width, height), mode="mask")

    def __getitem__(self, index):
        """``index`` or ``(index, augmentation seed)`` (training): ``(image, target, index)``."""
        rng = None
        if isinstance(index, tuple):
            index, seed = index
            rng = random.Random(seed)
        img_id = self.ids[index]
        img = self._load_raw(index) if self.hybrid else self._load_image(index)
        width, height = img.size
        anno = _instances(self.coco.imgToAnns.get(img_id, []))
        boxes = torch.as_tensor([a["bbox"] for a in anno], dtype=torch.float32).reshape(-1, 4)
        target = BoxList(boxes, (width, height), mode="xywh").convert("xyxy")
        target.add_field("labels", torch.tensor([self.json_category_id_to_contiguous_id[a["category_id"]]
                                                 for a in anno], dtype=torch.int64))
        target.add_field("masks", self._segmentation(anno, width, height))
        target = target.clip_to_image(remove_empty=True)
        if self.transforms is not None:
            img, target = self.transforms(img, target, rng) if rng is not None else self.transforms(img, target)
        masks = target.get_field("masks")
        if masks.mode == "poly":
            masks.packed_polygons()  # built here, in the loader worker, for the batched mask-target rasterizer
        return img, target, index
