"""The host-sync counter (utils/host_syncs.py) sees every kind of wait it lists, and the static training step, as
the trainer runs it, has none: what bench/host_syncs.py reports, kept by a test."""
import io
import logging

import pytest
import torch
import torchvision

from helpers import SMALL_OVERRIDES, bench_module
from maskrcnn_benchmark.utils.host_syncs import DATA_SHAPE, HOST_READ, MASKED_WRITE, HostSyncCounter

_x = torch.tensor([3.0, 0.0, 2.0, 2.0])
_mask = _x > 1
_boxes = torch.tensor([[0.0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60]])

# (what, kind, code): one wait each
WAITS = [
    ("item", HOST_READ, lambda: _x[0].item()),
    ("int()", HOST_READ, lambda: int(_x[0])),
    ("float()", HOST_READ, lambda: float(_x.sum())),
    ("bool()", HOST_READ, lambda: bool(_x.any())),
    ("torch.equal", HOST_READ, lambda: torch.equal(_x, _x)),
    ("tolist", HOST_READ, lambda: _x.tolist()),
    ("numpy", HOST_READ, lambda: _x.numpy()),
    ("nonzero", DATA_SHAPE, lambda: _x.nonzero()),
    ("argwhere", DATA_SHAPE, lambda: torch.argwhere(_x)),
    ("boolean-mask read", DATA_SHAPE, lambda: _x[_mask]),
    ("masked_select", DATA_SHAPE, lambda: torch.masked_select(_x, _mask)),
    ("unique", DATA_SHAPE, lambda: torch.unique(_x)),
    ("unique_consecutive", DATA_SHAPE, lambda: torch.unique_consecutive(_x)),
    ("bincount", DATA_SHAPE, lambda: torch.bincount(_x.long())),
    ("repeat_interleave without output_size", DATA_SHAPE,
     lambda: torch.repeat_interleave(torch.arange(4), _x.long())),
    ("torchvision nms", DATA_SHAPE, lambda: torchvision.ops.nms(_boxes, torch.tensor([0.9, 0.8, 0.7]), 0.5)),
    # one op whose kernel reads a value back inside it (torch tags it data_dependent_output)
    ("torch.allclose", HOST_READ, lambda: torch.allclose(_x, _x)),
    # a masked write ATen cannot run as masked_fill (nor inductor as a select): it finds the mask's rows first
    ("masked write of several values", DATA_SHAPE, lambda: _x.clone().__setitem__(_mask, torch.tensor([7.0, 8, 9]))),
    ("masked write through two indices", DATA_SHAPE,
     lambda: torch.zeros(4, 4).__setitem__((_mask, torch.tensor([0, 1, 2])), 1.0)),
    # one value, but a tensor (on the GPU in a GPU run, where ATen finds the mask's rows first: the CPU run cannot
    # tell it from a Python number by its device), and an accumulating write
    ("masked write of a one-element tensor", DATA_SHAPE, lambda: _x.clone().__setitem__(_mask, _x.min())),
    ("accumulating masked write", DATA_SHAPE,
     lambda: _x.clone().index_put_((_mask,), torch.tensor(1.0), accumulate=True)),
    # an op torch does not tag whose CUDA kernel reads a value: masked_fill's tensor value (.item() in the kernel)
    ("masked_fill with a tensor value", HOST_READ, lambda: _x.masked_fill(_mask, _x.max())),
    ("masked_fill_ with a tensor value", HOST_READ, lambda: _x.clone().masked_fill_(_mask, torch.tensor(1.0))),
]


def test_every_op_torch_tags_with_a_data_dependent_shape_is_judged():
    """The counter's list of data-dependent shapes is written by hand: an op torch tags dynamic_output_shape is
    either on it, or decomposed before any dispatch (CompositeImplicitAutograd: the counter sees the ops it is made
    of, one_hot's maximum read back as a host read)."""
    from maskrcnn_benchmark.utils import host_syncs as hs

    judged = hs._DATA_SHAPES | hs._REPEAT_INTERLEAVE | hs._INDEX_READS
    tagged = set()
    for name in dir(torch.ops.aten):
        packet = getattr(torch.ops.aten, name, None)
        for overload in getattr(packet, "overloads", lambda: [])():
            op = getattr(packet, overload)
            if torch.Tag.dynamic_output_shape in op.tags and not torch._C._dispatch_has_kernel_for_dispatch_key(
                    op.name(), "CompositeImplicitAutograd"):
                tagged.add(op)
    assert tagged and sorted(map(str, tagged - judged)) == []
    with hs.HostSyncCounter() as counter:
        torch.nn.functional.one_hot(_x.long())
    assert counter.by_kind()[HOST_READ] >= 1, counter.report()


@pytest.mark.parametrize("what,kind,code", WAITS, ids=[w[0] for w in WAITS])
def test_each_listed_wait_is_counted_once(what, kind, code):
    with HostSyncCounter() as counter:
        code()
    assert counter.total == 1, counter.report()
    assert counter.by_kind() == {kind: 1}, counter.report()


def test_what_is_not_a_wait_is_not_counted():
    """A masked write is listed (inductor lowers it to a select) but not counted, and the report says why; a
    repeat_interleave given its output size, a where, a sort and a top-k wait for nothing."""
    y = _x.clone()
    with HostSyncCounter() as counter:
        y[_mask] = 0.0
        torch.repeat_interleave(torch.arange(4), _x.long(), output_size=7)
        torch.where(_mask, _x, 0.0).sort()
        _x.topk(2)
        _x.masked_fill(_mask, 2.0)  # a Python number: the host holds it
    assert counter.total == 0, counter.report()
    assert counter.by_kind() == {MASKED_WRITE: 1}
    (line,) = counter.report()
    assert MASKED_WRITE in line  # the whole reason, not cut to a column's width
    assert "tests/utils/test_host_syncs.py" in line


@pytest.mark.slow  # builds and steps a small R-FPN twice (about 5 s)
def test_the_static_training_step_waits_for_the_host_nowhere():
    """bench/host_syncs.py's count (forward, backward, optimizer step, LR schedule: ``Trainer.run_step`` on a
    static batch, the fused SGD of a compiled run) on the tests' small model: 0, each site named otherwise. The
    non-finite loss check and the metrics line run outside the step; the bench lists them apart."""
    host_syncs = bench_module("host_syncs")
    opts = [str(v) for v in SMALL_OVERRIDES] + ["MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE", "64"]
    metrics_reads = []
    logger = logging.getLogger("maskrcnn_benchmark")
    for images, log_lines in ((1, False), (2, True)):
        # the second time the metrics line is written (as in a run), the first time it is not: the count of its
        # reads must not depend on it (a value read only while a log record is formatted went uncounted)
        handler = logging.StreamHandler(io.StringIO()) if log_lines else None
        level = logger.level
        if handler:
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)
        try:
            step, finite, metrics, _ = host_syncs.count_step(images, 64, 96, "float32", opts=opts)
        finally:
            if handler:
                logger.removeHandler(handler)
                logger.setLevel(level)
        assert step.total == 0, "\n".join(step.report())
        assert finite.total >= 1  # the checks outside the step do read the loss: the counter is not blind here
        metrics_reads.append(metrics.total)
        if handler:
            assert "lr: " in handler.stream.getvalue()
    assert metrics_reads[0] == metrics_reads[1], metrics_reads
