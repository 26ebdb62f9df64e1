from .bounding_box import FLIP_LEFT_RIGHT, FLIP_TOP_BOTTOM, BoxList  # noqa: F401
from .image_list import ImageList, RawImage, RawImageBatch, to_image_list  # noqa: F401
from .target_batch import TargetBatch  # noqa: F401
from .segmentation_mask import SegmentationMask  # noqa: F401
