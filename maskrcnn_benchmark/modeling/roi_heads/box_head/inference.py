"""Box-head post-processing (inference): decode, clip, threshold, per-class NMS, top detections per image."""
import torch
import torch.nn.functional as F

from ....layers import batched_nms, batched_nms_padded
from ....structures.bounding_box import BoxList
from ...box_coder import BoxCoder
from ...rpn.rpn import clip_boxes
from ...utils import image_sizes_tensor, rank_within_groups, split_by_image


class PostProcessor:
    """Reference semantics, all images and classes of the batch in one NMS call: on the CPU :func:`batched_nms`,
    torchvision's kernel once per image and class with candidates, as the reference runs its own; elsewhere
    (``padded_nms`` None: by device) :func:`batched_nms_padded`, the same kept set with three host waits per batch
    instead of one per image and class:

    * softmax, decode every class's box, clip to ``[0, W - 1] x [0, H - 1]``;
    * candidates with score ``> SCORE_THRESH`` (strict), NMS per image and class at ``NMS`` ("+1" IoU);
    * when an image has more than ``DETECTIONS_PER_IMG`` detections, keep those whose score is ``>=`` the
      ``DETECTIONS_PER_IMG``-th largest (``kthvalue`` in the reference: ties at the cut may keep a few more);
    * output order is class-major (1, 2, ...), within a class by decreasing score, which is the order of the
      reference's GPU NMS (its CPU kernel returns ascending proposal index instead; the set is the same).
    """

    def __init__(self, score_thresh, nms, detections_per_img, box_coder, cls_agnostic_bbox_reg=False,
                 padded_nms=None):
        self.padded_nms = padded_nms
        self.score_thresh = score_thresh
        self.nms = nms
        self.detections_per_img = detections_per_img
        self.box_coder = box_coder
        self.cls_agnostic_bbox_reg = cls_agnostic_bbox_reg

    @torch.no_grad()
    def __call__(self, class_logits, box_regression, rois, image_sizes_list):
        n = len(image_sizes_list)
        device = class_logits.device
        probs = F.softmax(class_logits.float(), -1)
        num_classes = probs.shape[1]
        box_regression = box_regression.float()
        if self.cls_agnostic_bbox_reg:
            box_regression = box_regression[:, -4:].repeat(1, num_classes)
        boxes = self.box_coder.decode(box_regression, rois[:, 1:]).view(-1, num_classes, 4)
        image_idx = rois[:, 0].long()
        sizes = image_sizes_tensor(image_sizes_list, device)[image_idx]
        boxes = clip_boxes(boxes, sizes[:, None, :].expand(-1, num_classes, -1))
        roi_idx, label = (probs[:, 1:] > self.score_thresh).nonzero(as_tuple=True)
        label = label + 1
        cand_boxes = boxes[roi_idx, label]
        cand_scores = probs[roi_idx, label]
        cand_image = image_idx[roi_idx]
        padded = device.type != "cpu" if self.padded_nms is None else self.padded_nms
        keep = (batched_nms_padded if padded else batched_nms)(cand_boxes, cand_scores,
                                                               cand_image * num_classes + label, self.nms)
        if self.detections_per_img > 0:
            img = cand_image[keep]
            rank = rank_within_groups(img)  # rank by decreasing score within the image
            kth = rank == self.detections_per_img - 1
            thresh = torch.full((n,), float("-inf"), device=device)
            thresh[img[kth]] = cand_scores[keep[kth]]
            keep = keep[cand_scores[keep] >= thresh[img]]
        group = cand_image[keep] * num_classes + label[keep]
        keep = keep[torch.sort(group, stable=True).indices]  # image, then class, then score
        order, counts = split_by_image(cand_image[keep], n)
        keep = keep[order]
        out = []
        for (h, w), kept in zip(image_sizes_list, keep.split(counts)):
            b = BoxList(cand_boxes[kept], (w, h), mode="xyxy")
            b.add_field("scores", cand_scores[kept])
            b.add_field("labels", label[kept])
            out.append(b)
        return out


def make_roi_box_post_processor(cfg):
    h = cfg.MODEL.ROI_HEADS
    return PostProcessor(h.SCORE_THRESH, h.NMS, h.DETECTIONS_PER_IMG, BoxCoder(h.BBOX_REG_WEIGHTS),
                         cfg.MODEL.CLS_AGNOSTIC_BBOX_REG)
