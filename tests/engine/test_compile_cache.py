"""torch's compile caches must not serve code compiled for an older version of one of the package's custom ops: the
caches key on the traced graph, which names an op but holds none of its code (its body, its fake implementation)."""
import importlib
import os

import pytest
import torch

import maskrcnn_benchmark
from maskrcnn_benchmark.engine import compile as compile_module
from maskrcnn_benchmark.engine.compile import CUSTOM_OP_MODULES, CompiledForward, custom_op_tag, tag_compile_caches

roi_align_module = importlib.import_module("maskrcnn_benchmark.layers.roi_align")
SCALES = [0.25, 0.125, 0.0625, 0.03125]


@pytest.fixture
def cache_key_tag():
    """The process-wide tag, empty for the test and restored after it."""
    with torch.compiler.config.patch(cache_key_tag=""):
        yield


def test_every_module_that_defines_a_custom_op_is_in_the_tag():
    root = os.path.dirname(maskrcnn_benchmark.__file__)
    defining = set()
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(folder, name)) as f:
                    if "torch.library.custom_op(" in f.read():
                        rel = os.path.relpath(os.path.join(folder, name[:-3]), root)
                        defining.add(rel.replace(os.sep, "."))
    assert defining >= {"layers.roi_align", "layers.nms", "modeling.roi_heads.mask_head.loss"}
    assert defining <= set(CUSTOM_OP_MODULES)


def test_the_compiled_step_keys_the_caches_on_the_ops_source_and_keeps_the_users_tag(cache_key_tag, monkeypatch):
    torch.compiler.config.cache_key_tag = "site-tag"
    CompiledForward(torch.nn.Linear(2, 2), backend="eager")  # torch.compile is lazy: nothing compiles here
    before = custom_op_tag()
    assert torch.compiler.config.cache_key_tag == f"site-tag,{before}"
    monkeypatch.setattr(compile_module, "_custom_op_sources", lambda: [b"another version of the ops"])
    assert custom_op_tag() != before  # other ops' source, another key
    assert tag_compile_caches() == f"site-tag,{custom_op_tag()}"  # ours replaced, not appended


@pytest.mark.slow  # inductor compiles a small graph twice (about 20 s on 2 cores)
def test_a_changed_custom_op_is_not_served_from_a_stale_compile_cache(cache_key_tag, monkeypatch, tmp_path):
    """Yesterday's package: the CPU ROIAlign with a contiguous output (its fake said so), compiled into a cache.
    Today's: channels-last. With the same cache, today's compile must not reuse yesterday's code, whose stride
    assertion fails on today's output."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    gen = torch.Generator().manual_seed(0)
    feats = [torch.randn(2, 8, s, s, generator=gen) for s in (24, 12, 6, 3)]
    rois = torch.tensor([[0, 10.0, 20.0, 60.0, 70.0], [1, 0.0, 0.0, 90.0, 95.0], [0, 5.0, 5.0, 30.0, 20.0]])
    levels = torch.tensor([0, 1, 2])

    def pooled(feats, rois, levels):
        return roi_align_module.multilevel_roi_align(feats, rois, levels, 7, SCALES, 2) * 2

    with monkeypatch.context() as m:
        m.setattr(roi_align_module, "_uses_kernel", lambda device, sampling_ratio: True)  # op and fake: contiguous
        m.setattr(compile_module, "_custom_op_sources", lambda: [b"yesterday's ops"])
        tag_compile_caches()
        torch._dynamo.reset()
        before = torch.compile(pooled)(feats, rois, levels)
    assert before.is_contiguous()
    tag_compile_caches()
    torch._dynamo.reset()
    try:
        after = torch.compile(pooled)(feats, rois, levels)
    finally:
        torch._dynamo.reset()
    assert after.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(after, before)
