"""ROI mask head (``roi_heads.mask``): feature extractor and predictor with the reference's module names;
training on the positive sampled ROIs with polygon targets, inference on the detections."""
import torch
from torch import nn

from ...registry import ROI_MASK_FEATURE_EXTRACTORS, ROI_MASK_PREDICTOR
from ...utils import compact, rois_from_boxlists
from .inference import Masker
from .loss import bitmap_mask_targets, mask_rcnn_loss, padded_mask_targets


def positive_slots(samples, num_images, capacity=None):
    """The positive samples, each image's in sample order, images one after the other: ``(rows into the sample
    slots, valid)``. ``capacity`` T: each image's positives in T slots of their own (``N*T`` rows; a static batch,
    T the sampler's positive budget: shapes that do not depend on the data), or None: the batch's positives
    packed, as many rows as there are positives (one host read, their count; an eager step computes no mask-head
    row it does not need)."""
    positive = (samples.slot_valid & (samples.slot_labels > 0)).view(num_images, -1)
    s = positive.shape[1]
    if capacity is None:
        chosen = compact(positive.view(1, -1))
        return chosen.index.view(-1), chosen.valid.view(-1)
    chosen = compact(positive, max(1, min(int(capacity), s)))
    rows = chosen.index + torch.arange(num_images, device=positive.device)[:, None] * s
    return rows.reshape(-1), chosen.valid.reshape(-1)


def batch_mask_targets(targets, rois, image, matched, resolution):
    """``(K, M, M)`` targets of K ROIs (``rois (K, 4)``, ``image``/``matched`` their image and ground-truth slot)
    from a :class:`TargetBatch`: one rasterizer call for all of them (polygons), or ROIAlign of the bitmaps."""
    if targets.has_polygons:
        instance = image * targets.num_slots + matched
        return padded_mask_targets(targets.poly_vertices, targets.poly_next, targets.poly_part, targets.poly_parts,
                                   instance, rois, resolution, targets.image_wh[image])
    return bitmap_mask_targets(targets.bitmaps[image, matched], rois, resolution)


class ROIMaskHead(nn.Module):
    def __init__(self, cfg, in_channels):
        super().__init__()
        m = cfg.MODEL.ROI_MASK_HEAD
        self.feature_extractor = ROI_MASK_FEATURE_EXTRACTORS[m.FEATURE_EXTRACTOR](cfg, in_channels)
        self.predictor = ROI_MASK_PREDICTOR[m.PREDICTOR](cfg, self.feature_extractor.out_channels)
        self.resolution = m.RESOLUTION
        self.postprocess_masks = m.POSTPROCESS_MASKS
        self.masker = Masker(threshold=m.POSTPROCESS_MASKS_THRESHOLD)
        h = cfg.MODEL.ROI_HEADS
        # the sampler's positive budget: the fixed number of mask rows per image of a static (compiled) step
        self.max_positives = int(h.BATCH_SIZE_PER_IMAGE * h.POSITIVE_FRACTION)

    def forward(self, features, samples_or_detections, targets=None):
        """Training: ``samples`` of the box head -> ``{loss_mask}``, on the positive samples in fixed slots per
        image. Eval: adds a ``mask`` field (``(D, 1, M, M)`` probabilities of the predicted class, or pasted image
        masks with POSTPROCESS_MASKS) to each detection."""
        if self.training:
            samples = samples_or_detections
            n = targets.boxes.shape[0]
            rows, valid = positive_slots(samples, n, self.max_positives if targets.static else None)
            rois = samples.slot_rois[rows]
            labels = samples.slot_labels[rows]
            mask_logits = self.predictor(self.feature_extractor(features, rois))
            with torch.no_grad():
                mask_targets = batch_mask_targets(targets, rois[:, 1:], samples.slot_image[rows],
                                                  samples.slot_matched[rows], self.resolution)
            return {"loss_mask": mask_rcnn_loss(mask_logits, labels, mask_targets, valid)}
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
