import torch

from ..structures.boxlist_ops import pairwise_iou


class Matcher:
    """Assigns each prediction (anchor or proposal) to a ground-truth box, for a whole padded batch at once.

    Input: ``(N, G, P)`` IoU matrices where padded ground-truth rows are negative. Output ``(N, P)``:
    the matched gt index, ``BELOW_LOW_THRESHOLD`` (-1) or ``BETWEEN_THRESHOLDS`` (-2).
    With ``allow_low_quality_matches`` each ground truth also keeps the predictions of its highest IoU
    (ties included), as in the reference, even when that IoU is 0 (a ground truth that overlaps no prediction
    then claims all of them; real anchors always overlap an in-image box).
    """

    BELOW_LOW_THRESHOLD = -1
    BETWEEN_THRESHOLDS = -2

    def __init__(self, high_threshold, low_threshold, allow_low_quality_matches=False):
        if low_threshold > high_threshold:
            raise ValueError("low_threshold must not exceed high_threshold")
        self.high_threshold = high_threshold
        self.low_threshold = low_threshold
        self.allow_low_quality_matches = allow_low_quality_matches

    def __call__(self, match_quality):
        n, g, p = match_quality.shape
        if g == 0:
            return torch.full((n, p), self.BELOW_LOW_THRESHOLD, dtype=torch.int64, device=match_quality.device)
        matched_vals, all_matches = match_quality.max(dim=1)
        matches = all_matches.clone()
        matches[matched_vals < self.low_threshold] = self.BELOW_LOW_THRESHOLD
        between = (matched_vals >= self.low_threshold) & (matched_vals < self.high_threshold)
        matches[between] = self.BETWEEN_THRESHOLDS
        if self.allow_low_quality_matches:
            best_for_gt = match_quality.amax(dim=2, keepdim=True)
            best_for_gt.masked_fill_(best_for_gt < 0, float("nan"))  # padded rows (-1) equal nothing
            low_quality = (match_quality == best_for_gt).any(dim=1)
            matches = torch.where(low_quality, all_matches, matches)
        return matches


def batched_iou(gt_boxes, gt_valid, boxes):
    """IoU ``(N, G, P)`` between padded gt ``(N, G, 4)`` and boxes ``(N, P, 4)`` (or ``(1, P, 4)``, the same for
    every image); padded gt rows get -1."""
    return pairwise_iou(gt_boxes, boxes).masked_fill_(~gt_valid[:, :, None], -1.0)
