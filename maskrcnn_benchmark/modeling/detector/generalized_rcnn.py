import torch
from torch import nn

from ..backbone import build_backbone
from ..registry import META_ARCH
from ..roi_heads.roi_heads import build_roi_heads
from ..rpn.rpn import build_rpn


@META_ARCH.register("GeneralizedRCNN")
class GeneralizedRCNN(nn.Module):
    """Backbone (ResNet-FPN) -> RPN -> ROI heads (box, mask).

    ``forward(images, targets)`` returns the loss dict in training (``loss_objectness``, ``loss_rpn_box_reg``,
    ``loss_classifier``, ``loss_box_reg``, ``loss_mask``) and one BoxList per image in eval, with fields
    ``scores``, ``labels`` and ``mask``.
    """

    def __init__(self, cfg):
        super().__init__()
        self.backbone = build_backbone(cfg)
        self.rpn = build_rpn(cfg, self.backbone.out_channels)
        self.roi_heads = build_roi_heads(cfg, self.backbone.out_channels)
        self.size_divisible = cfg.DATALOADER.SIZE_DIVISIBILITY
        self.channels_last = cfg.NHWC

    def forward(self, images, targets=None):
        """``images`` an :class:`~maskrcnn_benchmark.structures.image_list.ImageList`, ``targets`` a
        :class:`~maskrcnn_benchmark.structures.target_batch.TargetBatch` (static or not: its padding), as the data
        loader yields them; the reference's tensors and BoxLists go through :mod:`maskrcnn_benchmark.modeling.
        compat`."""
        if self.training and targets is None:
            raise ValueError("targets are required in training mode")
        x = images.tensors
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        features = self.backbone(x)
        proposals, proposal_losses = self.rpn(images, features, targets)
        _, result, detector_losses = self.roi_heads(features, proposals, targets)
        if self.training:
            return {**proposal_losses, **detector_losses}
        return result

