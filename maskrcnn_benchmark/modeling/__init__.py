"""Model components. Importing this package registers every built-in component in the registries."""
from .backbone import backbone as _backbone  # noqa: F401
from .detector import build_detection_model  # noqa: F401
from .roi_heads import box_head as _box_head, mask_head as _mask_head  # noqa: F401
from .rpn import rpn as _rpn  # noqa: F401
