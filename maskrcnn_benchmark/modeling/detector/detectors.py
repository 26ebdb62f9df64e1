from ..registry import META_ARCH
from . import generalized_rcnn  # noqa: F401  (registers GeneralizedRCNN)


def build_detection_model(cfg):
    """Build the model named by ``MODEL.META_ARCHITECTURE`` (``NHWC`` puts it in channels_last)."""
    model = META_ARCH[cfg.MODEL.META_ARCHITECTURE](cfg)
    if cfg.NHWC:
        import torch

        model = model.to(memory_format=torch.channels_last)
    return model
