"""Operations on BoxLists: IoU, NMS, concatenation, small-box removal ("+1" convention throughout)."""
import torch

from ..layers import nms as _box_nms
from .bounding_box import TO_REMOVE, BoxList


def pairwise_iou(boxes1, boxes2):
    """IoU matrix ``(..., N, M)`` of ``xyxy`` boxes ``(..., N, 4)`` and ``(..., M, 4)``, "+1" convention.

    The ``(..., N, M)`` intermediates are computed in place on coordinate planes (no ``(..., N, M, 2)`` corner
    tensors): the RPN matches every anchor of a batch against every ground-truth slot, 2 x 96 x 268,569 pairs at
    800x1344, where each fresh intermediate costs more than its arithmetic. The float32 operations and their order
    are the reference's: ``w = (min(x2) - max(x1)) + 1`` clamped at 0 (and ``h``), ``inter = w * h``, ``inter /
    ((area1 + area2) - inter)``."""
    if not boxes1.is_floating_point():
        boxes1 = boxes1.float()
    if not boxes2.is_floating_point():
        boxes2 = boxes2.float()
    area1 = (boxes1[..., 2] - boxes1[..., 0] + TO_REMOVE) * (boxes1[..., 3] - boxes1[..., 1] + TO_REMOVE)
    area2 = (boxes2[..., 2] - boxes2[..., 0] + TO_REMOVE) * (boxes2[..., 3] - boxes2[..., 1] + TO_REMOVE)
    x1, y1, x2, y2 = (c.contiguous()[..., :, None] for c in boxes1.unbind(-1))
    u1, v1, u2, v2 = (c.contiguous()[..., None, :] for c in boxes2.unbind(-1))
    inter = torch.minimum(x2, u2).sub_(torch.maximum(x1, u1)).add_(TO_REMOVE).clamp_(min=0).mul_(
        torch.minimum(y2, v2).sub_(torch.maximum(y1, v1)).add_(TO_REMOVE).clamp_(min=0))
    return inter.div_((area1[..., :, None] + area2[..., None, :]).sub_(inter))


def boxlist_iou(boxlist1, boxlist2):
    if boxlist1.size != boxlist2.size:
        raise ValueError(f"boxlists must be of the same image, got {boxlist1} and {boxlist2}")
    return pairwise_iou(boxlist1.convert("xyxy").bbox, boxlist2.convert("xyxy").bbox)


def boxlist_nms(boxlist, nms_thresh, max_proposals=-1, score_field="scores"):
    """NMS on a BoxList by ``score_field``; keeps at most ``max_proposals`` (all when <= 0)."""
    if nms_thresh <= 0:
        return boxlist
    mode = boxlist.mode
    boxlist = boxlist.convert("xyxy")
    keep = _box_nms(boxlist.bbox, boxlist.get_field(score_field), nms_thresh)
    if max_proposals > 0:
        keep = keep[:max_proposals]
    return boxlist[keep].convert(mode)


def remove_small_boxes(boxlist, min_size):
    """Keep boxes whose "+1" width and height are both at least ``min_size``."""
    wh = boxlist.convert("xywh").bbox[:, 2:]
    keep = ((wh[:, 0] >= min_size) & (wh[:, 1] >= min_size)).nonzero().squeeze(1)
    return boxlist[keep]


def cat_boxlist(bboxes):
    """Concatenate BoxLists of the same image size, mode and fields."""
    if not bboxes:
        raise ValueError("cat_boxlist needs at least one BoxList")
    size, mode = bboxes[0].size, bboxes[0].mode
    fields = set(bboxes[0].fields())
    for b in bboxes:
        if b.size != size or b.mode != mode or set(b.fields()) != fields:
            raise ValueError("cat_boxlist needs BoxLists of one image size, mode and set of fields")
    out = BoxList(torch.cat([b.bbox for b in bboxes], dim=0), size, mode)
    for field in fields:
        values = [b.get_field(field) for b in bboxes]
        if len(values) == 1:  # as the reference: one BoxList's fields as they are (masks included)
            out.add_field(field, values[0])
        elif all(isinstance(v, torch.Tensor) for v in values):
            out.add_field(field, torch.cat(values, dim=0))
        else:
            raise ValueError(f"cat_boxlist cannot concatenate the field '{field}' ({type(values[0]).__name__}): "
                             "tensor fields only")
    return out
