"""Every custom op of the package (``maskrcnn::*``, what ``torch.compile`` treats as opaque) runs under the host-sync
counter, its Python body included: none reads a device value back or makes a data-dependent shape, so none needs
the ``cudagraph_unsafe`` tag and a CUDA graph can hold all of them. A new custom op without a case here fails."""
import importlib

import pytest
import torch
from torch._library.custom_ops import OPDEFS

from maskrcnn_benchmark.layers.rasterize import pad_polygons
from maskrcnn_benchmark.utils.host_syncs import HostSyncCounter

importlib.import_module("maskrcnn_benchmark.modeling")  # registers every op


def _boxes(g, k, seed=0):
    gen = torch.Generator().manual_seed(seed)
    xy = torch.rand(g, k, 2, generator=gen) * 100
    return torch.cat((xy, xy + torch.rand(g, k, 2, generator=gen) * 40), -1)


def _nms():
    return (_boxes(3, 50), torch.rand(3, 50), torch.rand(3, 50) > 0.2, 0.7), {}


def _roi_align():
    feats = [torch.randn(2, 4, 32 // 2 ** i, 48 // 2 ** i) for i in range(4)]
    rois = torch.cat((torch.randint(0, 2, (20, 1)).float(), _boxes(1, 20)[0]), 1)
    return (feats, rois, torch.randint(-1, 4, (20,)), 7, [0.25, 0.125, 0.0625, 0.03125], 2), {}


def _roi_align_backward():
    (feats, rois, levels, size, scales, ratio), _ = _roi_align()
    shapes = [int(v) for f in feats for v in f.shape]
    return (torch.randn(20, 4, 7, 7), rois, levels, shapes, scales, ratio), {}


def _mask_targets():
    lengths, owner = torch.tensor([5, 3, 7, 4]), torch.tensor([0, 0, 1, 2])
    slot, nxt, part, parts = pad_polygons(lengths, owner, 3)
    vertices = torch.zeros((3 * nxt.shape[1], 2))
    vertices[slot] = torch.rand(int(lengths.sum()), 2) * 60
    rois = _boxes(1, 6)[0]
    return (vertices.view(3, -1, 2), nxt, part, torch.zeros((3, parts), dtype=torch.bool),
            torch.tensor([0, 1, 2, 0, 1, 2]), rois, 28, torch.tensor([[96.0, 96.0]]).expand(6, 2), "legacy_2018"), {}


def _roi_align_kernel_path():
    """Adaptive sampling (ratio 0): the path that runs torchvision's kernel per level, as on CUDA."""
    args, kwargs = _roi_align()
    return args[:-1] + (0,), kwargs


def _roi_align_backward_kernel_path():
    args, kwargs = _roi_align_backward()
    return args[:-1] + (0,), kwargs


CASES = {
    "maskrcnn::nms_keep_padded": _nms,
    "maskrcnn::multilevel_roi_align": _roi_align,
    "maskrcnn::multilevel_roi_align_backward": _roi_align_backward,
    "maskrcnn::polygon_mask_targets": _mask_targets,
}


def test_every_custom_op_has_a_case():
    ours = {name for name in OPDEFS if name.startswith("maskrcnn::")}
    assert ours == set(CASES), "a custom op without a host-sync case (or a case for an op that is gone)"


# Each op's other path, where it has one: the ROIAlign ops' per-level kernel (CUDA's, and the CPU's for ratio 0).
OTHER_PATHS = [("maskrcnn::multilevel_roi_align", _roi_align_kernel_path),
               ("maskrcnn::multilevel_roi_align_backward", _roi_align_backward_kernel_path)]


@pytest.mark.parametrize("name,case", sorted(CASES.items()) + OTHER_PATHS,
                         ids=[*sorted(CASES), *(f"{n} (kernel path)" for n, _ in OTHER_PATHS)])
def test_custom_op_never_waits_for_the_host(name, case):
    args, kwargs = case()
    op = getattr(torch.ops.maskrcnn, name.split("::")[1]).default
    with HostSyncCounter() as counter:
        out = op(*args, **kwargs)
    assert counter.total == 0, "\n".join(counter.report())
    assert out is not None
    # and so it carries no cudagraph_unsafe tag: nothing to keep out of a CUDA graph
    assert not any("cudagraph_unsafe" in str(t) for t in op.tags)


def test_the_counter_sees_inside_a_custom_op():
    """The counter's claim rests on this: a sync hidden in an op's Python body is counted."""
    @torch.library.custom_op("maskrcnn_test::hides_a_sync", mutates_args=())
    def hides(x: torch.Tensor) -> torch.Tensor:
        return x[: int(x.sum().item())].clone() if x.numel() else x.clone()

    @hides.register_fake
    def _(x):
        return torch.empty_like(x)

    with HostSyncCounter() as counter:
        torch.ops.maskrcnn_test.hides_a_sync(torch.ones(3, dtype=torch.int64))
    assert counter.total == 0  # another namespace: not looked into
    counter = HostSyncCounter()
    import maskrcnn_benchmark.utils.host_syncs as hs

    original = hs._custom_op_body
    try:
        hs._custom_op_body = lambda func: OPDEFS[func._schema.name]._init_fn \
            if func._schema.name.startswith("maskrcnn_test::") else original(func)
        with counter:
            torch.ops.maskrcnn_test.hides_a_sync(torch.ones(3, dtype=torch.int64))
    finally:
        hs._custom_op_body = original
    assert counter.total == 1 and " item " in "\n".join(counter.report())


@pytest.mark.parametrize("where", ["forward", "backward"])
def test_a_sync_planted_in_a_real_ops_body_is_counted_through_autograd(monkeypatch, where):
    """The positive control above uses another namespace and a substituted lookup; here a host read is planted in
    the body of maskrcnn::multilevel_roi_align itself (its forward's sample grid, or the scatter its backward op
    runs), and the step's way of calling it (forward, then .backward() through autograd) must count it: else a 0
    could mean the body was never looked into."""
    ra = importlib.import_module("maskrcnn_benchmark.layers.roi_align")  # the module (the package exports a function
    #                                                                     of its name)
    name = "_sample_grid" if where == "forward" else "_roi_align_scatter"
    original = getattr(ra, name)

    def planted(*args, **kwargs):
        args[0].sum().item()  # the planted wait
        return original(*args, **kwargs)

    monkeypatch.setattr(ra, name, planted)
    (feats, rois, levels, size, scales, ratio), _ = _roi_align()
    feats = [f.requires_grad_() for f in feats]
    with HostSyncCounter() as counter:
        out = torch.ops.maskrcnn.multilevel_roi_align(feats, rois, levels, size, scales, ratio)
        out.sum().backward()
    assert counter.total >= 1 and all(f.grad is not None for f in feats), "\n".join(counter.report())
    assert any("roi_align.py" in line for line in counter.report()), "\n".join(counter.report())


def test_the_nms_op_on_its_cuda_path_waits_for_nothing_around_its_kernel(monkeypatch):
    """On CUDA maskrcnn::nms_keep_padded launches the Triton scan (layers/nms_triton.py) instead of the tensor-op
    scan the CPU cases above run: the Python around that launch (the block size, the launch's arguments) is
    counted here with the launch replaced by a stand-in that writes the tensor-op scan's mask (the kernel's own
    result is tests/layers/test_nms_device.py's, interpreted by Triton on the CPU)."""
    nms = importlib.import_module("maskrcnn_benchmark.layers.nms")
    launched = []

    class Launch:
        def __getitem__(self, grid):
            def run(mask, valid, keep, k, w, BLOCK_W):
                launched.append((grid, k, w, BLOCK_W))
                keep.copy_(nms._scan_torch(mask, valid.bool()).to(keep.dtype))
            return run

    args, kwargs = _nms()
    expected = torch.ops.maskrcnn.nms_keep_padded(*args, **kwargs)
    monkeypatch.setattr(nms, "_use_triton", lambda device: True)
    monkeypatch.setattr(nms, "_scan_kernel", lambda: Launch())
    with HostSyncCounter() as counter:
        out = torch.ops.maskrcnn.nms_keep_padded(*args, **kwargs)
    assert launched and counter.total == 0, "\n".join(counter.report())
    assert torch.equal(out, expected)
