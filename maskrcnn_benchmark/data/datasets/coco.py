"""COCO-format detection dataset (pycocotools), with the reference's filtering and contiguous class ids."""
import contextlib
import io
import logging
import os

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from ...structures.bounding_box import BoxList
from ...structures.segmentation_mask import SegmentationMask

logger = logging.getLogger(__name__)


class DatasetError(RuntimeError):
    """A dataset file or entry that cannot be used; the message names it."""


def _usable(anno):
    """Non-crowd annotations with a box of positive size (crowd regions are ignored, as in the reference)."""
    return [a for a in anno if not a.get("iscrowd", 0) and a["bbox"][2] > 1 and a["bbox"][3] > 1]


class COCODataset(torch.utils.data.Dataset):
    """Images and instance annotations of a COCO json.

    In training, images without a usable annotation are removed. Category ids are mapped to contiguous labels
    ``1..K`` (0 is background) in sorted id order; ``contiguous_category_id_to_json_id`` maps back for eval.
    ``__getitem__`` returns ``(image, BoxList target with labels and masks, index)``.
    """

    def __init__(self, ann_file, root, remove_images_without_annotations, transforms=None):
        if not os.path.isfile(ann_file):
            raise DatasetError(f"annotation file '{ann_file}' does not exist")
        if not os.path.isdir(root):
            raise DatasetError(f"image folder '{root}' does not exist")
        from pycocotools.coco import COCO

        try:
            with contextlib.redirect_stdout(io.StringIO()):
                self.coco = COCO(ann_file)
        except Exception as e:
            raise DatasetError(f"annotation file '{ann_file}' is not valid COCO json: {e}") from None
        self.ann_file = ann_file
        self.root = root
        self.transforms = transforms
        ids = sorted(self.coco.imgs.keys())
        if remove_images_without_annotations:
            ids = [i for i in ids if _usable(self.coco.imgToAnns.get(i, []))]
        if not ids:
            raise DatasetError(f"dataset '{ann_file}' has no images"
                               + (" with usable annotations" if remove_images_without_annotations else ""))
        self.ids = ids
        cat_ids = sorted(self.coco.getCatIds())
        self.json_category_id_to_contiguous_id = {c: i + 1 for i, c in enumerate(cat_ids)}
        self.contiguous_category_id_to_json_id = {v: k for k, v in self.json_category_id_to_contiguous_id.items()}
        self.id_to_img_map = dict(enumerate(self.ids))
        self._warned_degenerate = False

    def __len__(self):
        return len(self.ids)

    def get_img_info(self, index):
        return self.coco.imgs[self.ids[index]]

    def image_path(self, index):
        return os.path.join(self.root, self.coco.imgs[self.ids[index]]["file_name"])

    def _load_image(self, index):
        path = self.image_path(index)
        try:
            with Image.open(path) as img:
                return img.convert("RGB")
        except FileNotFoundError:
            raise DatasetError(f"image file '{path}' does not exist") from None
        except (UnidentifiedImageError, OSError, SyntaxError) as e:
            raise DatasetError(f"image file '{path}' is corrupt or not an image: {e}") from None

    def _segmentation(self, anno, width, height):
        """Polygons when every instance has them, else bitmaps (RLE instances decoded)."""
        from pycocotools import mask as mask_utils

        polys, all_poly = [], True
        for a in anno:
            seg = a.get("segmentation")
            if isinstance(seg, list):
                parts = []
                for p in seg:
                    if not isinstance(p, (list, tuple)) or len(p) % 2 or \
                            not all(isinstance(v, (int, float)) for v in p):
                        raise DatasetError(f"annotation {a.get('id')} of image '{self.ann_file}' has an "
                                           "invalid polygon (needs an even number of numeric coordinates)")
                    if len(p) >= 6:
                        parts.append(p)
                if not parts and not self._warned_degenerate:
                    logger.warning("%s: annotation %s has only degenerate polygons (< 3 points); its mask is "
                                   "empty", self.ann_file, a.get("id"))
                    self._warned_degenerate = True
                polys.append(parts)
            else:
                all_poly = False
                polys.append(seg)
        if all_poly and all(polys):
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
        img_id = self.ids[index]
        img = self._load_image(index)
        width, height = img.size
        anno = _usable(self.coco.imgToAnns.get(img_id, []))
        boxes = torch.as_tensor([a["bbox"] for a in anno], dtype=torch.float32).reshape(-1, 4)
        target = BoxList(boxes, (width, height), mode="xywh").convert("xyxy")
        target.add_field("labels", torch.tensor([self.json_category_id_to_contiguous_id[a["category_id"]]
                                                 for a in anno], dtype=torch.int64))
        target.add_field("masks", self._segmentation(anno, width, height))
        target = target.clip_to_image(remove_empty=True)
        if self.transforms is not None:
            img, target = self.transforms(img, target)
        masks = target.get_field("masks")
        if masks.mode == "poly":
            masks.polygon_edges()  # precomputed here, in the loader worker, for the mask-target rasterizer
        return img, target, index
