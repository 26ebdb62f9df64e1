"""The reference's input shapes, adapted to the one form the model takes: the compatibility surface.

The model and its parts take one batch form, the one the data loader yields: an
:class:`~maskrcnn_benchmark.structures.image_list.ImageList` and a
:class:`~maskrcnn_benchmark.structures.target_batch.TargetBatch` ("static" is the batch's padding,
:attr:`TargetBatch.static`). maskrcnn-benchmark's own interfaces take image tensors and lists of per-image
:class:`~maskrcnn_benchmark.structures.bounding_box.BoxList` targets and proposals instead; user code ported from
it and the golden parity tests (tests/parity, against the reference's recorded outputs) call them that way. This
module is where those shapes become the model's, and nowhere else in the package:

* :func:`target_batch` - BoxList targets -> a TargetBatch;
* :func:`image_list` - an image tensor or a list of them -> an ImageList padded as the model's config says;
* :func:`train_forward` - ``model(images, targets)`` with tensors and BoxLists, as the reference's model took them;
* :func:`rpn_proposals` - the RPN post-processor on per-image sizes (and BoxList targets), returning BoxLists;
* :func:`rpn_targets` - the RPN's anchor labels and regression targets for BoxList targets;
* :func:`box_samples` - the box head's sampling of BoxList proposals against BoxList targets;
* :func:`box_losses` - the box head's losses from the logits of the sampled rows only (the reference's layout).

Each adapter converts on the host and then calls the one implementation; none is on a training path.
"""
from ..structures.image_list import to_image_list
from ..structures.target_batch import TargetBatch
from .rpn.rpn import Proposals
from .utils import image_sizes_tensor, pad_boxes

__all__ = ["target_batch", "image_list", "train_forward", "rpn_proposals", "rpn_targets", "proposals_from_boxlists",
           "box_samples", "box_losses"]


def target_batch(targets, device=None, static=False, max_gt=0):
    """A :class:`TargetBatch` of per-image BoxList targets (``labels`` and, optionally, ``masks`` fields). The
    tight padding of an eager step; ``max_gt`` > 0: a static batch of that many slots; ``static`` alone: the
    tight padding, with the ROI heads' fixed row counts."""
    batch = TargetBatch.from_boxlists(list(targets), max_gt=max_gt, device=device)
    batch.static = batch.static or static
    return batch


def image_list(model, images):
    """``images`` (a ``(N, C, H, W)`` or ``(C, H, W)`` tensor, a list of ``(C, H, W)`` tensors, or an ImageList)
    padded to the model's ``DATALOADER.SIZE_DIVISIBILITY``, as the reference's model did on entry."""
    bare = model.module if hasattr(model, "module") else model
    return to_image_list(images, bare.size_divisible)


def train_forward(model, images, targets, static=False):
    """``model(images, targets)`` the reference's way: images as tensors or an ImageList, targets as BoxLists."""
    images = image_list(model, images)
    return model(images, target_batch(targets, device=images.tensors.device, static=static))


def rpn_proposals(post_processor, anchors, objectness, box_regression, image_sizes_list, targets=None):
    """``RPNPostProcessor`` the reference's way: one BoxList of proposals (``objectness`` field) per image;
    ``image_sizes_list`` ``[(height, width)]``, ``targets`` BoxLists (appended as proposals in training) or None."""
    device = objectness[0].device
    sizes = image_sizes_tensor(image_sizes_list, device)
    batch = None if targets is None else target_batch(targets, device=device)
    return post_processor.select(anchors, objectness, box_regression, sizes, batch).to_boxlists(image_sizes_list)


def rpn_targets(loss_evaluator, anchors, targets, image_sizes_list):
    """``(labels (N, A), regression targets (N, A, 4))`` of the concatenated ``anchors`` for BoxList targets."""
    device = anchors.device
    return loss_evaluator.prepare_targets(anchors, target_batch(targets, device=device),
                                          image_sizes_tensor(image_sizes_list, device))


def proposals_from_boxlists(boxlists, device=None):
    """The RPN's padded :class:`~maskrcnn_benchmark.modeling.rpn.rpn.Proposals` of per-image BoxLists (an
    ``objectness`` field if they have one, else 1)."""
    boxlists = list(boxlists)
    fields = ("objectness",) if all(b.has_field("objectness") for b in boxlists) else ()
    boxes, valid, extra = pad_boxes(boxlists, fields, device=device)
    objectness = extra["objectness"] if fields else valid.to(boxes.dtype)
    return Proposals(boxes, objectness, valid)


def box_samples(loss_evaluator, proposals, targets, static=False):
    """The box head's sampling (``FastRCNNLossComputation.subsample``) of BoxList proposals against BoxList
    targets; ``static``: ``BATCH_SIZE_PER_IMAGE`` slots per image."""
    device = targets[0].bbox.device
    return loss_evaluator.subsample(proposals_from_boxlists(proposals, device=device),
                                    target_batch(targets, device=device, static=static))


def box_losses(loss_evaluator, class_logits, box_regression, samples):
    """The box head's losses from ``class_logits``/``box_regression`` of the sampled rows only (``samples.rois``
    order, the reference's layout): laid into the sample slots, then the one loss."""
    rows = samples.slot_valid.nonzero().squeeze(1)
    slot_logits = class_logits.new_zeros((samples.slot_valid.numel(), class_logits.shape[1]))
    slot_regression = box_regression.new_zeros((samples.slot_valid.numel(), box_regression.shape[1]))
    return loss_evaluator(slot_logits.index_copy(0, rows, class_logits),
                          slot_regression.index_copy(0, rows, box_regression), samples)

