"""Compile mode: the training step under ``torch.compile`` (``COMPILE``, ``--compile``).

The training forward is written with static shapes (docs/numerics.md, "A step with static shapes"): the loader
pads every batch to one of its fixed image sizes and its ground truth to a fixed number of slots
(:func:`~maskrcnn_benchmark.data.build.static_sizes`, ``DATALOADER.MAX_ANNOTATIONS_PER_IMAGE``; such a batch is
``TargetBatch.static``, and the ROI heads then keep fixed row counts too), so dynamo
traces the whole forward as one graph per image size, with ``dynamic=False``. The step waits for the host
nowhere: ``bench/host_syncs.py`` counts 0 host reads and 0 data-dependent shapes in one step (forward, backward,
loss scaling, optimizer) for 2 and for 12 images, the package's custom ops (NMS, multi-level ROIAlign, the mask
targets) included; the non-finite loss check and the metrics line read the device every 20 iterations, outside
the step. So with ``mode="reduce-overhead"`` CUDA graphs can hold the compiled model's forward and backward (on an
H100 gpu-check's compiled run recorded 2, in its warm-up, and none after; loss scaling, the fused SGD and the LR
schedule run eagerly after them, also without a host read with torch's fused SGD: apex's FusedSGD, where apex is
installed, has the scaler read its overflow flag every float16 step); inductor's graph partition is set explicitly on (older
torch in NGC images has it off), and a failed capture falls back to the eager step with one warning, like any compile
failure. On an H100 (torch 2.11) that mode ran at 70.3 img/s against the eager step's 85.3 and the compiled step's 54.1
without CUDA graphs (12 images of 800x1333, float16; on an H200: 82.0, 96.8, 59.6; docs/benchmarks.md): ``COMPILE`` is
off unless asked for, and asked for on one GPU it takes CUDA graphs (engine/resolve.py).

Only the polygon buffers change size from batch to batch (the largest number of vertices and parts of a slot,
rounded up to a power of two): those dimensions are marked dynamic, so they never cause a recompile. They only
feed the mask-target op, whose output shape does not depend on them.

torch's compile caches (on disk, reused across runs) are keyed on the source of the package's custom ops too
(:func:`tag_compile_caches`): the traced graph names those ops but holds none of their code, so after a change to
one of them a warm cache would otherwise serve code compiled for the old version.

Compiling happens before ``run_start``: :meth:`CompiledForward.warm_up` runs forward and backward once per image
size on a synthetic batch (no dataset access, no optimizer step, the random state restored), twice with CUDA
graphs (the second call records them), as NVIDIA's submissions capture their CUDA graphs during initialization.
Evaluation runs the eager model (its shapes depend on the detections).
"""
import hashlib
import importlib.util
import logging
import time

import torch

from ..data import warm_up_batch
from ..data.shapes import POLYGON_SLOTS
from ..utils import comm, signals
from ..utils.errors import exception_chain
from ..utils.signals import Stopped

logger = logging.getLogger(__name__)

# The modules whose code torch.compile does not trace: the package's custom ops (``torch.library.custom_op``: their
# bodies, and the fake implementations that give the compiler their outputs' shapes and strides). torch's compile
# caches (inductor's FX graph cache, AOTAutograd's cache; on disk, kept across runs and upgrades) key on the traced
# graph, which names such an op but holds none of its code: after a change to an op a warm cache would serve code
# compiled for the old one (an op whose output strides changed: the compiled step fails its first iteration on
# inductor's stride assertion; tests/engine/test_compile_cache.py). :func:`tag_compile_caches` adds their source
# to the key (with the modules that run inside their bodies: the rasterizer, the Triton scan).
CUSTOM_OP_MODULES = ("layers.roi_align", "layers.nms", "layers.nms_triton", "layers.rasterize",
                     "modeling.roi_heads.mask_head.loss")
_TAG_PREFIX = "maskrcnn-ops-"


def _custom_op_sources():
    top = __name__.split(".")[0]
    sources = []
    for name in CUSTOM_OP_MODULES:
        with open(importlib.util.find_spec(f"{top}.{name}").origin, "rb") as f:
            sources.append(f.read())
    return sources


def custom_op_tag():
    """``maskrcnn-ops-<16 hex digits>``: a digest of the source of :data:`CUSTOM_OP_MODULES`."""
    digest = hashlib.sha256()
    for source in _custom_op_sources():
        digest.update(len(source).to_bytes(8, "little"))
        digest.update(source)
    return _TAG_PREFIX + digest.hexdigest()[:16]


def tag_compile_caches():
    """Put :func:`custom_op_tag` into ``torch.compiler.config.cache_key_tag`` (part of every compile cache's key),
    keeping a tag the user set (``TORCH_COMPILE_CACHE_KEY_TAG``) and replacing an earlier one of ours. Returns the
    whole tag, or None on a torch without the option."""
    config = getattr(torch.compiler, "config", None)
    if config is None or not hasattr(config, "cache_key_tag"):
        return None
    others = [t for t in str(config.cache_key_tag).split(",") if t and not t.startswith(_TAG_PREFIX)]
    config.cache_key_tag = ",".join(others + [custom_op_tag()])
    return config.cache_key_tag


@torch.no_grad()
def precompute_anchors(model, sizes, device):
    """The anchors of each fixed image size, before anything is compiled (the feature map sizes come from one
    eager pass of the backbone over a zero image of that size)."""
    bare = model.module if hasattr(model, "module") else model
    for h, w in sizes:
        features = bare.backbone(torch.zeros((1, 3, h, w), device=device))
        bare.rpn.anchor_generator.precompute([tuple(f.shape[-2:]) for f in features], device)


def _mark_polygon_buffers_dynamic(targets):
    if getattr(targets, "has_polygons", False):  # a TargetBatch: V vertices and P parts per slot vary
        for t in (targets.poly_vertices, targets.poly_next, targets.poly_part, targets.poly_parts):
            torch._dynamo.mark_dynamic(t, 1)


class CompiledForward:
    """The model's training forward, compiled: ``forward(images, targets) -> loss dict``.

    If compiling fails (an inductor or backend error on a new machine), the failure is logged once with its
    reason and the run continues with the eager model: same weights, same step, only slower.

    A batch of fewer than ``batch_size`` images (the last of an aspect-ratio group in an epoch, the reference's
    sampler keeps it) runs eagerly: compiled, each such size would be one more graph to compile.
    """

    def __init__(self, model, mode="default", backend="inductor", batch_size=None):
        self.model = model
        self.batch_size = batch_size
        self.eager_batches = 0
        self.mode = mode
        options = {"mode": mode} if backend == "inductor" else {}
        self.cudagraphs = backend == "inductor" and mode in ("reduce-overhead", "max-autotune")
        if self.cudagraphs:
            set_graph_partition(True)
        tag_compile_caches()
        self.compiled = torch.compile(model, backend=backend, dynamic=False, **options)
        self.failure = None
        self.compile_seconds = 0.0
        self.last_call_compiled = False  # whether the last call ran the compiled step (not an eager batch)

    def __call__(self, images, targets):
        self.last_call_compiled = False
        if self.failure is not None:
            return self.model(images, targets)
        if self.batch_size and len(targets) != self.batch_size:
            if not self.eager_batches:
                logger.info("a batch of %d images (fewer than %d, the end of an aspect-ratio group) runs eagerly; "
                            "so will every such batch", len(targets), self.batch_size)
            self.eager_batches += 1
            return self.model(images, targets)
        if self.cudagraphs:
            # A new iteration: outputs of the previous replay may be overwritten (their values were copied).
            torch.compiler.cudagraph_mark_step_begin()
        _mark_polygon_buffers_dynamic(targets)
        self.last_call_compiled = True
        try:
            return self.compiled(images, targets)
        except Exception as e:  # noqa: BLE001 - any backend failure: run on eagerly, say why
            _raise_if_stopped(e)
            if not _is_compile_error(e):
                raise
            self._fail(e)
            return self.model(images, targets)

    def fail_backward(self, e):
        """Whether ``e``, raised by the backward of the last call (a CUDA graph recorded in the warm-up or on the
        clock whose capture failed), becomes this forward's compile failure: one warning, and the caller runs
        the step again eagerly. Not when that call ran eagerly (a short batch), not with several ranks (the others
        wait in the all-reduces this backward did not finish: the run ends with the error), nor for an error the
        eager step would raise too."""
        _raise_if_stopped(e)
        if (self.failure is not None or not self.last_call_compiled or not _is_compile_error(e)
                or comm.get_world_size() > 1):
            return False
        self._fail(e)
        return True

    def _fail(self, e):
        # kept without its traceback: the frames of the failed call hold its step's tensors (activations, graph)
        self.failure = e.with_traceback(None)
        logger.warning("torch.compile failed (%s: %s): the run continues with the eager model", type(e).__name__,
                       str(e).splitlines()[0] if str(e) else "")

    def warm_up(self, sizes, images_per_batch, device, max_gt, dtype=None, polygon_slots=POLYGON_SLOTS):
        """Compile for each image size in ``sizes`` before the clock starts: forward and backward of a synthetic
        batch, gradients dropped, random state restored (the run then draws exactly what an eager run would).

        With CUDA graphs (``reduce-overhead``, ``max-autotune``) each size runs twice: torch's CUDA-graph trees run
        a function's first call as a warm-up and record its graphs at the second, so one call would leave the
        recording to the first training iteration, after ``run_start``. A compile or capture error of the forward
        is a compile failure (one warning): the remaining calls still run, eagerly, so a rank whose forward failed
        alone takes part in the same gradient all-reduces as the others. One of the backward is a compile failure
        in a single process; with several ranks it ends the run (the others wait in the all-reduces that backward
        did not finish)."""
        if self.failure is not None:
            return 0.0
        t0 = time.perf_counter()
        allow_recompiles(len(sizes))
        skips = cudagraph_skips()
        precompute_anchors(self.model, sizes, device)
        cpu_state = torch.get_rng_state()
        cuda_state = torch.cuda.get_rng_state_all() if device.type == "cuda" else None
        repeats = 2 if self.cudagraphs else 1  # the same calls on every rank, whatever fails on one
        try:
            for h, w in sizes:
                images, targets = warm_up_batch(images_per_batch, h, w, max_gt, device, polygon_slots)
                for _ in range(repeats):
                    with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
                        losses = self(images, targets)
                    # as the trainer's step: no gradients in before the backward (a CUDA-graph replay's gradient
                    # outputs are invalid once the next call has begun; accumulating into them raises)
                    for p in self.model.parameters():
                        p.grad = None
                    try:
                        sum(losses.values()).backward()
                    except Exception as e:  # noqa: BLE001 - a capture error of the backward graph
                        if not self.fail_backward(e):  # a compiled call's capture error, in one process
                            raise
        finally:
            for p in self.model.parameters():
                p.grad = None
            torch.set_rng_state(cpu_state)
            if cuda_state is not None:
                torch.cuda.set_rng_state_all(cuda_state)
        self.compile_seconds = time.perf_counter() - t0
        logger.info("compiled the training step for %d image size(s) %s in %.1f s (mode %s)%s", len(sizes),
                    ", ".join(f"{h}x{w}" for h, w in sizes), self.compile_seconds, self.mode,
                    " - failed, eager" if self.failure is not None else "")
        skipped = cudagraph_skips() - skips
        if self.cudagraphs and self.failure is None and skipped:
            logger.warning("CUDA graphs: inductor left %d compiled graph(s) without them (a CPU tensor, a mutated "
                           "input, ...; a graph with no CUDA work counts too; TORCH_LOGS=cudagraphs names each): "
                           "those parts run compiled, not graphed", skipped)
        return self.compile_seconds


def cudagraph_skips():
    """Inductor's count of the compiled graphs it left without CUDA graphs, in this process."""
    from torch._dynamo.utils import counters

    return counters["inductor"]["cudagraph_skips"]


def allow_recompiles(sizes):
    """Room in dynamo's per-frame recompile limit for ``sizes`` image sizes, each twice (a batch with more ground
    truth than DATALOADER.MAX_ANNOTATIONS_PER_IMAGE pads it to a larger size). Past the limit (8 by default) dynamo
    runs each new shape eagerly with a log line only: DATALOADER.STATIC_SHAPES_PER_ORIENTATION 5 (10 sizes) would
    run two of them eagerly for the whole run."""
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # torch < 2.6: the old
    setattr(config, name, max(int(getattr(config, name)), 2 * int(sizes) + 2))


def set_graph_partition(on=True):
    """Inductor's graph partition (the CUDA graphs of a compiled step split around any op that cannot be
    captured), set explicitly: off by default in older torch. Returns whether this torch has the option."""
    config = getattr(torch, "_inductor", None) and getattr(torch._inductor, "config", None)
    if config is None:
        import torch._inductor.config as config
    if not hasattr(config, "graph_partition"):
        return False
    config.graph_partition = bool(on)
    return True


# Messages of a CUDA-graph capture that failed (an op that synchronizes or allocates while the stream is
# captured), or of CUDA-graph trees refusing a tensor that a later replay overwrote (the static R-50 step under
# reduce-overhead on an H200, torch 2.11): the compiled step cannot run, the eager one can.
CAPTURE_ERRORS = ("operation not permitted when stream is capturing", "cudaErrorStreamCapture",
                  "CUDA graph capture", "captures_underway", "stream is capturing",
                  "operation failed due to a previous error during capture",
                  "accessing tensor output of CUDAGraphs that has been overwritten")


def _raise_if_stopped(e):
    """Raise the :class:`~maskrcnn_benchmark.utils.signals.Stopped` that ``e`` wraps: a stop signal whose handler
    raised while dynamo, AOTAutograd or inductor ran (minutes of the warm-up's compile), which they wrap in their own
    errors (BackendCompilerFailed, InternalTorchDynamoError, InductorError) as any other. Taken for a compile
    failure, the run would go on eagerly with its stop signals set aside. Also when the process took a stop signal
    whose Stopped did not survive (:func:`~maskrcnn_benchmark.utils.signals.received`)."""
    for link in exception_chain(e):
        if isinstance(link, Stopped):
            raise link.with_traceback(None) from None
    if signals.received() is not None:
        raise Stopped(signals.received()) from None


def _is_compile_error(e):
    """An error of dynamo/inductor/a backend compiler or of a CUDA-graph capture, as opposed to one of the step
    itself (which the eager model would raise too: out of memory, a bad target). A failed capture is often
    raised as another CUDA error, cudaStreamEndCapture's when torch.cuda.graph ends the capture, with the op's
    own error as its context: the chain is read."""
    if isinstance(e, torch.OutOfMemoryError):
        return False
    return any((type(link).__module__ or "").startswith(("torch._dynamo", "torch._inductor", "torch._functorch",
                                                          "triton")) or
               type(link).__name__ in ("BackendCompilerFailed", "InternalTorchDynamoError", "Unsupported") or
               (isinstance(link, RuntimeError) and any(m in str(link) for m in CAPTURE_ERRORS))
               for link in exception_chain(e))


def graph_breaks(fn, *args):
    """``(breaks, graphs, reasons)`` of ``torch._dynamo.explain(fn)(*args)`` (default dynamo config): the number
    of graph breaks and graphs, and one ``"file:line: reason"`` per break."""
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(fn)(*args)
    reasons = []
    for b in explanation.break_reasons:
        frame = b.user_stack[-1] if b.user_stack else None
        where = f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}: " if frame is not None else ""
        reasons.append(where + b.reason.splitlines()[0])
    torch._dynamo.reset()
    return explanation.graph_break_count, explanation.graph_count, reasons
