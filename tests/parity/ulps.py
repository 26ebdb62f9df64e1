"""Comparing float32 results in units in the last place, and the bounds the parity tests allow."""
import torch

# torch picks its CPU exp/softmax kernels at run time from the CPU's features (vectorized Sleef paths for AVX2 or
# AVX512, glibc's ifunc variants), and they round the last bit of a few values differently. The golden files were
# written on a CPU whose kernels agree with the ones on the CPUs this project's CI had run on (bitwise equal there).
# On an AVX512 Xeon the same arithmetic gives last-bit differences: softmax scores up to 3 units in the last place
# (ulps), decoded boxes (exp of the size deltas) up to 1 ulp *of the image size* (x1 = ctr - 0.5 * w subtracts
# numbers of that scale, so a small coordinate carries their absolute error); replaying the reference's decode
# formula with torch on that CPU gives bitwise our values. So scores are compared to SCORE_ULPS, boxes to
# BOX_ULPS at the image scale (6.1e-5 px at 480 px; the golden README allows 1e-4 px for independent code);
# everything discrete (labels, counts, order, keep sets) and the sigmoid probabilities stay exact.
SCORE_ULPS = 4
BOX_ULPS = 2  # exp differs by 1 ulp, times w (<= the image scale), halved, plus the rounding of x1 itself


def max_ulps(a, b):
    """Largest distance between float32 tensors ``a`` and ``b`` in units in the last place (0 = bitwise equal)."""
    assert a.dtype == b.dtype == torch.float32 and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    if a.numel() == 0:
        return 0

    def ordered(x):  # float32 bit patterns mapped to integers that are monotonic in the value
        i = x.contiguous().view(torch.int32).long()
        return torch.where(i < 0, -(i & 0x7FFFFFFF), i)

    return int((ordered(a) - ordered(b)).abs().max())


def box_error_in_image_ulps(a, b, image_size_wh):
    """Largest absolute box difference, in ulps of float32 at the image's largest coordinate."""
    scale = torch.tensor(float(max(image_size_wh)), dtype=torch.float32)
    ulp = float(torch.nextafter(scale, torch.tensor(float("inf"))) - scale)
    return float((a - b).abs().max()) / ulp if a.numel() else 0.0


def paired_box_error_in_image_ulps(boxes, scores, ref_boxes, ref_scores, image_size_wh, score_atol=0.0):
    """Largest box difference (ulps at the image scale, as :func:`box_error_in_image_ulps`) once each box is paired
    with a reference box whose score is within ``score_atol`` of its own: the order among such scores is free.

    Scores within ``score_atol`` of one another (chained, both sides together) form a group; a group must hold as
    many of our boxes as reference boxes, else the sets differ (``inf``); within a group each box pairs with a
    reference box of a score within ``score_atol`` of its own (not merely chained to it), by the pairing whose
    largest error is least. With ``score_atol=0`` the groups are the exact ties. Sorting by score then box cannot
    pair them where the scores differ in their last bits (another device's sigmoid): two near-equal scores swap
    places, and each box meets its neighbour's."""
    assert len(boxes) == len(scores) and len(ref_boxes) == len(ref_scores)
    if len(boxes) != len(ref_boxes):
        return float("inf")
    if not len(boxes):
        return 0.0
    scale = torch.tensor(float(max(image_size_wh)), dtype=torch.float32)
    ulp = float(torch.nextafter(scale, torch.tensor(float("inf"))) - scale)
    s = torch.cat((scores, ref_scores)).double()
    order = torch.argsort(s)
    group = torch.empty_like(order)
    group[order] = torch.cat((order.new_zeros(1), (s[order].diff() > score_atol).long().cumsum(0)))
    ours_group, ref_group = group[:len(boxes)], group[len(boxes):]
    n = int(group.max()) + 1
    if not torch.equal(torch.bincount(ours_group, minlength=n), torch.bincount(ref_group, minlength=n)):
        return float("inf")
    i, j = torch.argsort(ours_group, stable=True), torch.argsort(ref_group, stable=True)  # same groups, row by row
    error = (boxes[i] - ref_boxes[j]).abs().amax(1)
    sizes = torch.bincount(ours_group, minlength=n)
    single = (sizes == 1)[ours_group[i]]  # one box each side: adjacent scores, within score_atol
    worst = float(error[single].max()) if bool(single.any()) else 0.0
    for g in torch.where(sizes > 1)[0].tolist():
        a, b = i[ours_group[i] == g], j[ref_group[j] == g]
        cost = (boxes[a][:, None, :] - ref_boxes[b][None, :, :]).abs().amax(2).double()
        cost[(scores[a][:, None].double() - ref_scores[b][None, :].double()).abs() > score_atol] = float("inf")
        worst = max(worst, _bottleneck(cost.numpy()))
    return worst / ulp


def _bottleneck(cost):
    """The least ``t`` such that some one-to-one pairing of rows and columns uses only entries ``<= t`` (the
    pairing whose largest entry is least; ``inf`` if every pairing needs an ``inf`` entry)."""
    import numpy as np
    from scipy.optimize import linear_sum_assignment

    values = np.unique(cost)
    lo, hi = 0, len(values) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        rows, cols = linear_sum_assignment(cost > values[mid])
        if (cost[rows, cols] > values[mid]).any():
            lo = mid + 1
        else:
            hi = mid
    return float(values[lo])
