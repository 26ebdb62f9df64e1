"""Layers with maskrcnn-benchmark's legacy numerics: torchvision's kernels where they fit (ROIAlign on CUDA, NMS at
inference), the package's own torch and Triton ops elsewhere (multi-level ROIAlign, the padded NMS, mask targets)."""
from .batch_norm import FrozenBatchNorm2d
from .mask_paste import expand_boxes, paste_mask_windows, paste_masks_in_image
from .misc import cat, group_norm
from .nms import batched_nms, batched_nms_padded, nms
from .rasterize import rasterize_polygons
from .roi_align import ROIAlign, roi_align
from .smooth_l1_loss import smooth_l1_loss

__all__ = ["FrozenBatchNorm2d", "ROIAlign", "roi_align", "nms", "batched_nms", "batched_nms_padded", "smooth_l1_loss",
           "cat", "group_norm", "rasterize_polygons", "expand_boxes", "paste_mask_windows",
           "paste_masks_in_image"]
