"""The parity tests' comparisons themselves (no golden outputs needed)."""
import math

import pytest
import torch

from ulps import BOX_ULPS, paired_box_error_in_image_ulps

SIZE = (480, 320)


def _boxes(n):
    g = torch.Generator().manual_seed(0)
    xy = torch.rand(n, 2, generator=g) * 300
    return torch.cat((xy, xy + 10 + torch.rand(n, 2, generator=g) * 100), 1)


def test_near_equal_scores_pair_in_either_order_within_the_tolerance():
    ref_boxes, ref_scores = _boxes(4), torch.tensor([0.9, 0.8 + 4e-7, 0.8, 0.7])
    # another device: the two near-equal probabilities differ in their last bits and come out swapped
    boxes, scores = ref_boxes[[0, 2, 1, 3]], torch.tensor([0.9, 0.8 + 3e-7, 0.8 + 1e-7, 0.7])
    assert paired_box_error_in_image_ulps(boxes, scores, ref_boxes, ref_scores, SIZE, 1e-6) == 0
    # exact comparison (the CPU's): the scores must be equal, so the same boxes no longer pair
    assert paired_box_error_in_image_ulps(boxes, scores, ref_boxes, ref_scores, SIZE, 0.0) == math.inf


def test_exact_ties_pair_in_any_order():
    ref_boxes, ref_scores = _boxes(5), torch.tensor([0.9, 0.5, 0.5, 0.5, 0.1])
    order = [0, 3, 1, 2, 4]
    assert paired_box_error_in_image_ulps(ref_boxes[order], ref_scores[order], ref_boxes, ref_scores, SIZE) == 0


def test_a_different_box_or_set_is_caught():
    ref_boxes, ref_scores = _boxes(6), torch.tensor([0.9, 0.8, 0.8, 0.6, 0.5, 0.4])
    moved = ref_boxes.clone()
    moved[2, 0] += 0.01  # inside a tie group
    assert paired_box_error_in_image_ulps(moved, ref_scores, ref_boxes, ref_scores, SIZE) > BOX_ULPS
    moved = ref_boxes.clone()
    moved[4] = moved[5]  # a lone score with another box
    assert paired_box_error_in_image_ulps(moved, ref_scores, ref_boxes, ref_scores, SIZE, 1e-6) > BOX_ULPS
    swapped = torch.tensor([0.9, 0.8, 0.8, 0.6, 0.4, 0.5])  # scores apart by more than the tolerance
    assert paired_box_error_in_image_ulps(ref_boxes, swapped, ref_boxes, ref_scores, SIZE, 1e-6) > BOX_ULPS
    assert paired_box_error_in_image_ulps(ref_boxes[:5], ref_scores[:5], ref_boxes, ref_scores, SIZE) == math.inf


def test_last_bit_box_differences_stay_within_the_bound():
    ref_boxes, ref_scores = _boxes(3), torch.tensor([0.9, 0.8, 0.7])
    boxes = torch.nextafter(ref_boxes, torch.full_like(ref_boxes, float("inf")))  # 1 ulp of each coordinate
    assert 0 < paired_box_error_in_image_ulps(boxes, ref_scores, ref_boxes, ref_scores, SIZE) <= 1


def test_a_chain_of_near_equal_scores_does_not_pair_scores_further_apart():
    """0.5, 0.5 + 0.9e-6, 0.5 + 1.8e-6 chain into one group at 1e-6; the first and last are still 1.8e-6 apart."""
    ref_boxes = _boxes(3)
    ref_scores = torch.tensor([0.5, 0.5 + 9e-7, 0.5 + 1.8e-6], dtype=torch.float64).float()
    reversed_boxes = ref_boxes.flip(0)  # the boxes of the first and last scores exchanged
    assert paired_box_error_in_image_ulps(reversed_boxes, ref_scores, ref_boxes, ref_scores, SIZE, 1e-6) > BOX_ULPS
    assert paired_box_error_in_image_ulps(ref_boxes, ref_scores, ref_boxes, ref_scores, SIZE, 1e-6) == 0


def test_the_pairing_minimizes_the_largest_error_not_the_sum():
    """Tied boxes 2 ulps apart: ours [x + 2u, x + 4u] against [x, x + 2u] pair at 2 ulps each; the pairing of least
    total error ([x + 2u] with [x + 2u], [x + 4u] with [x]) has a 4-ulp pair."""
    ulp = float(torch.nextafter(torch.tensor(480.0), torch.tensor(float("inf"))) - 480.0)
    x = torch.tensor([[100.0, 100.0, 200.0, 200.0]])
    ref_boxes = torch.cat((x, x + torch.tensor([2 * ulp, 0, 0, 0])))
    boxes = torch.cat((x + torch.tensor([2 * ulp, 0, 0, 0]), x + torch.tensor([4 * ulp, 0, 0, 0])))
    scores = torch.tensor([0.5, 0.5])
    assert paired_box_error_in_image_ulps(boxes, scores, ref_boxes, scores, SIZE) == pytest.approx(2, abs=0.01)
