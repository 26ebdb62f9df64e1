"""ROI mask head (``roi_heads.mask``): feature extractor and predictor with the reference's module names;
training on the positive sampled ROIs with polygon targets, inference on the detections."""
import torch
from torch import nn

from ...registry import ROI_MASK_FEATURE_EXTRACTORS, ROI_MASK_PREDICTOR
from ..box_head.box_head import rois_from_boxlists
from .inference import Masker
from .loss import bitmap_mask_targets, mask_rcnn_loss, polygon_mask_targets


def batch_mask_targets(targets, samples, positive, resolution):
    """Targets of the positive sampled ROIs of a whole batch: one rasterizer call for all of them."""
    device = samples.rois.device
    masks = [t.get_field("masks") for t in targets]
    rois = samples.rois[positive, 1:]
    image = samples.image_index[positive]
    matched = samples.matched_gt[positive]
    if all(m.mode == "poly" for m in masks):
        packed = [m.packed_polygons() for m in masks]
        counts = torch.tensor([len(m) for m in masks], device=device)
        first_instance = torch.cumsum(counts, 0) - counts
        vertices = torch.cat([p[0].to(device) for p in packed])
        lengths = torch.cat([p[1].to(device) for p in packed])
        owner = torch.cat([p[2].to(device) + first_instance[i] for i, p in enumerate(packed)])
        sizes = torch.tensor([m.size for m in masks], device=device)[image]
        return polygon_mask_targets((vertices, lengths, owner), first_instance[image] + matched, rois, resolution,
                                    sizes)
    g = max(max(len(m) for m in masks), 1)
    h = max(m.size[1] for m in masks)
    w = max(m.size[0] for m in masks)
    bitmaps = torch.zeros((len(masks), g, h, w), dtype=torch.uint8, device=device)
    for i, m in enumerate(masks):
        t = m.convert("mask").get_mask_tensor().to(device)
        bitmaps[i, : t.shape[0], : t.shape[1], : t.shape[2]] = t
    return bitmap_mask_targets(bitmaps[image, matched], rois, resolution)


class ROIMaskHead(nn.Module):
    def __init__(self, cfg, in_channels):
        super().__init__()
        m = cfg.MODEL.ROI_MASK_HEAD
        self.feature_extractor = ROI_MASK_FEATURE_EXTRACTORS[m.FEATURE_EXTRACTOR](cfg, in_channels)
        self.predictor = ROI_MASK_PREDICTOR[m.PREDICTOR](cfg, self.feature_extractor.out_channels)
        self.resolution = m.RESOLUTION
        self.postprocess_masks = m.POSTPROCESS_MASKS
        self.masker = Masker(threshold=m.POSTPROCESS_MASKS_THRESHOLD)

    def forward(self, features, samples_or_detections, targets=None):
        """Training: ``samples`` of the box head -> ``{loss_mask}``. Eval: adds a ``mask`` field (``(D, 1, M, M)``
        probabilities of the predicted class, or pasted image masks with POSTPROCESS_MASKS) to each detection."""
        if self.training:
            samples = samples_or_detections
            positive = (samples.labels > 0).nonzero().squeeze(1)
            mask_logits = self.predictor(self.feature_extractor(features, samples.rois[positive]))
            with torch.no_grad():
                mask_targets = batch_mask_targets(targets, samples, positive, self.resolution)
            return {"loss_mask": mask_rcnn_loss(mask_logits, samples.labels[positive], mask_targets)}
        detections = samples_or_detections
        labels = torch.cat([d.get_field("labels") for d in detections])
        mask_logits = self.predictor(self.feature_extractor(features, rois_from_boxlists(detections)))
        probs = mask_logits[torch.arange(labels.numel(), device=labels.device), labels][:, None]
        probs = probs.float().sigmoid()
        for d, p in zip(detections, probs.split([len(d) for d in detections])):
            if self.postprocess_masks:
                p = self.masker.paste(p, d.bbox, d.size[1], d.size[0])
            d.add_field("mask", p)
        return {}


def build_roi_mask_head(cfg, in_channels):
    return ROIMaskHead(cfg, in_channels)
