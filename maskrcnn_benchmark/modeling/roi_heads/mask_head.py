"""ROI mask head: 4x(3x3 conv) feature extractor, deconv predictor, polygon mask targets, loss and Masker."""
import torch
import torch.nn.functional as F
from torch import nn

from ...layers import roi_align
from ..make_layers import make_gn
from ..poolers import Pooler
from ..registry import ROI_MASK_FEATURE_EXTRACTORS, ROI_MASK_PREDICTOR


@ROI_MASK_FEATURE_EXTRACTORS.register("MaskRCNNFPNFeatureExtractor")
class MaskRCNNFPNFeatureExtractor(nn.Module):
    def __init__(self, cfg, in_channels):
        super().__init__()
        h = cfg.MODEL.ROI_MASK_HEAD
        self.pooler = Pooler(h.POOLER_RESOLUTION, h.POOLER_SCALES, h.POOLER_SAMPLING_RATIO)
        layers = nn.ModuleList()
        for i, channels in enumerate(h.CONV_LAYERS):
            conv = nn.Conv2d(in_channels, channels, 3, padding=h.DILATION, dilation=h.DILATION,
                             bias=not h.USE_GN)
            nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
            if not h.USE_GN:
                nn.init.constant_(conv.bias, 0)
            layers.append(nn.Sequential(conv, make_gn(cfg, channels)) if h.USE_GN else conv)
            in_channels = channels
        self.blocks = layers
        self.out_channels = in_channels

    def forward(self, features, rois):
        x = self.pooler(features, rois)
        for block in self.blocks:
            x = F.relu(block(x))
        return x


@ROI_MASK_PREDICTOR.register("MaskRCNNC4Predictor")
class MaskRCNNC4Predictor(nn.Module):
    """2x2 stride-2 deconvolution + ReLU, then 1x1 conv to one mask logit map per class."""

    def __init__(self, cfg, in_channels):
        super().__init__()
        num_classes = cfg.MODEL.ROI_BOX_HEAD.NUM_CLASSES
        dim_reduced = cfg.MODEL.ROI_MASK_HEAD.CONV_LAYERS[-1]
        self.conv5_mask = nn.ConvTranspose2d(in_channels, dim_reduced, 2, 2, 0)
        self.mask_fcn_logits = nn.Conv2d(dim_reduced, num_classes, 1, 1, 0)
        for layer in (self.conv5_mask, self.mask_fcn_logits):
            nn.init.kaiming_normal_(layer.weight, mode="fan_out", nonlinearity="relu")
            nn.init.constant_(layer.bias, 0)

    def forward(self, x):
        return self.mask_fcn_logits(F.relu(self.conv5_mask(x)))


def rasterize_polygons_in_boxes(edges, boxes, resolution, max_elements=1 << 25):
    """Mask targets for K ROIs at once: ``(K, M, M)`` float {0, 1}.

    ``edges`` ``(K, E, 4)`` are the polygon edges of each ROI's ground-truth instance, ``boxes`` ``(K, 4)`` the
    ROIs. As the reference (crop the polygon to the box, scale it by ``M / max(w, 1)`` with ``w = x2 - x1``,
    rasterize at M x M), cell ``(i, j)`` is inside when its centre ``(j + 0.5, i + 0.5)`` mapped back to the
    image is inside the polygon by the even-odd rule. Chunked over edges to bound memory.
    """
    k = boxes.shape[0]
    device = boxes.device
    m = resolution
    if k == 0:
        return boxes.new_zeros((0, m, m))
    w = (boxes[:, 2] - boxes[:, 0]).clamp(min=1)
    h = (boxes[:, 3] - boxes[:, 1]).clamp(min=1)
    centres = (torch.arange(m, device=device, dtype=torch.float32) + 0.5) / m
    px = (boxes[:, 0, None] + centres[None, :] * w[:, None])[:, None, :, None]  # (K, 1, M(j), 1)
    py = (boxes[:, 1, None] + centres[None, :] * h[:, None])[:, :, None, None]  # (K, M(i), 1, 1)
    inside = torch.zeros((k, m, m), dtype=torch.bool, device=device)
    chunk = max(1, max_elements // max(k * m * m, 1))
    for s in range(0, edges.shape[1], chunk):
        e = edges[:, None, None, s:s + chunk, :]  # (K, 1, 1, e, 4)
        x0, y0, x1, y1 = e.unbind(-1)
        straddles = (y0 > py) != (y1 > py)
        dy = torch.where(y1 == y0, torch.ones_like(y1), y1 - y0)
        x_cross = x0 + (py - y0) * (x1 - x0) / dy
        crossings = (straddles & (px < x_cross)).sum(-1)
        inside ^= (crossings % 2).bool()
    return inside.float()


def project_bitmasks_on_boxes(bitmasks, boxes, resolution):
    """Mask targets from binary ground-truth masks ``(K, H, W)``: ROIAlign of each mask in its ROI, >= 0.5."""
    if boxes.shape[0] == 0:
        return boxes.new_zeros((0, resolution, resolution))
    rois = torch.cat((torch.arange(boxes.shape[0], device=boxes.device, dtype=boxes.dtype)[:, None], boxes), 1)
    out = roi_align(bitmasks[:, None].float(), rois, resolution, 1.0, 0)[:, 0]
    return (out >= 0.5).float()


def mask_head_loss(mask_logits, labels, mask_targets):
    """Binary cross-entropy on each positive ROI's own-class mask logits (mean over ROIs and pixels)."""
    if mask_targets.numel() == 0:
        return mask_logits.sum() * 0
    idx = torch.arange(labels.shape[0], device=labels.device)
    return F.binary_cross_entropy_with_logits(mask_logits[idx, labels].float(), mask_targets)


def expand_boxes(boxes, scale):
    w_half = (boxes[:, 2] - boxes[:, 0]) * 0.5 * scale
    h_half = (boxes[:, 3] - boxes[:, 1]) * 0.5 * scale
    x_c = (boxes[:, 2] + boxes[:, 0]) * 0.5
    y_c = (boxes[:, 3] + boxes[:, 1]) * 0.5
    return torch.stack((x_c - w_half, y_c - h_half, x_c + w_half, y_c + h_half), dim=1)


class Masker:
    """Pastes ``M x M`` mask probabilities into the image, all detections at once.

    Reference semantics: pad the mask by one pixel, expand the box by ``(M + 2) / M``, round it to integers,
    resize the padded mask bilinearly to the box's "+1" size, and threshold at 0.5. Implemented with one
    ``grid_sample`` per chunk of detections instead of a Python loop per box.
    """

    def __init__(self, threshold=0.5, padding=1, max_elements=1 << 27):
        self.threshold = threshold
        self.padding = padding
        self.max_elements = max_elements

    def paste(self, masks, boxes, height, width):
        """``masks`` ``(D, 1, M, M)`` probabilities, ``boxes`` ``(D, 4)`` -> ``(D, 1, H, W)`` bool."""
        d = masks.shape[0]
        if d == 0:
            return masks.new_zeros((0, 1, height, width), dtype=torch.bool)
        m = masks.shape[-1]
        padded = F.pad(masks.float(), (self.padding,) * 4)
        scale = (m + 2 * self.padding) / m
        boxes = expand_boxes(boxes.float(), scale).trunc()  # the reference casts to int32 (truncation)
        x0, y0, x1, y1 = boxes.unbind(1)
        bw = (x1 - x0 + 1).clamp(min=1)
        bh = (y1 - y0 + 1).clamp(min=1)
        out = []
        chunk = max(1, self.max_elements // (height * width))
        xs = torch.arange(width, device=masks.device, dtype=torch.float32)
        ys = torch.arange(height, device=masks.device, dtype=torch.float32)
        for s in range(0, d, chunk):
            sl = slice(s, s + chunk)
            gx = ((xs[None, :] - x0[sl, None]) + 0.5) / bw[sl, None] * 2 - 1  # (c, W)
            gy = ((ys[None, :] - y0[sl, None]) + 0.5) / bh[sl, None] * 2 - 1  # (c, H)
            inside_x = (xs[None, :] >= x0[sl, None]) & (xs[None, :] <= x1[sl, None])
            inside_y = (ys[None, :] >= y0[sl, None]) & (ys[None, :] <= y1[sl, None])
            grid = torch.stack((gx[:, None, :].expand(-1, height, -1), gy[:, :, None].expand(-1, -1, width)), -1)
            sampled = F.grid_sample(padded[sl], grid, mode="bilinear", padding_mode="border", align_corners=False)
            inside = (inside_y[:, :, None] & inside_x[:, None, :])[:, None]
            out.append((sampled > self.threshold) & inside)
        return torch.cat(out)

    def __call__(self, masks, boxlists):
        """Paste the ``"mask"`` field of each BoxList (resized to its image) into its image size."""
        return [self.paste(m, b.convert("xyxy").bbox, b.size[1], b.size[0]) for m, b in zip(masks, boxlists)]
