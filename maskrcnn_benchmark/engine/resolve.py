"""Every automatic value of the config fixed once, before anything is built: :func:`resolve`.

Five keys have an automatic value, fixed here for the device and the data of the run; every builder, program and
check reads the resolved config, never the automatic value:

=====================================  ===========================  ==========================================
key                                    automatic value               resolved to
=====================================  ===========================  ==========================================
``COMPILE``                            None                          False: the eager step (measured faster on
                                                                     the CPU, an H200 and an H100:
                                                                     docs/benchmarks.md)
``COMPILE_MODE``                       "auto"                        compiling on one GPU with inductor:
                                                                     "reduce-overhead" (CUDA graphs: 1.30x
                                                                     "default" on an H100, 1.38x on an H200;
                                                                     docs/benchmarks.md); else "default"
``DATALOADER.STATIC_POLYGON_SLOTS``    None                          (256, 8) with CUDA graphs (each polygon
                                                                     padding is one more recorded graph), else
                                                                     (16, 4): the least padding per mask
``DATALOADER.HYBRID``                  None                          True on CUDA (decode in the workers, resize
                                                                     and normalize on the GPU), False on the CPU
``MODEL.ROI_BOX_HEAD.NUM_CLASSES``     not given by the config       the data's categories + 1 (read from the
                                                                     annotation files; the MLPerf configs give 81)
=====================================  ===========================  ==========================================

The training run resolves after the process group is up (it needs the device) and before the model is built, and
logs the effective values; ``tools/check_recipe.py`` and ``tools/preflight.py`` judge the same resolved config.
"""
import logging

from ..config import given_keys
from ..config.config_utils import _note_given
from ..data.catalog import NUM_CLASSES_KEY, num_classes_from_data
from ..data.shapes import POLYGON_SLOTS, polygon_slots

logger = logging.getLogger(__name__)


def _is_cuda(device):
    return str(getattr(device, "type", device)).startswith("cuda")


def resolve(cfg, device, world_size=1, is_train=True):
    """A frozen copy of ``cfg`` with every automatic value fixed for ``device`` (a ``torch.device`` or its name)
    and ``world_size`` processes; ``is_train`` False (tools/test_net.py): the number of classes from the test
    data. Logs the resolved values, once per call."""
    out = cfg.clone()
    out.defrost()
    cuda = _is_cuda(device)
    notes = []
    if out.COMPILE is None:
        # torch 2.11, 800x1333, 12 images, float16, channels_last (docs/benchmarks.md, 2026-11-27): H100 eager
        # 85.3 img/s, compiled static step 70.3 with CUDA graphs (reduce-overhead), 54.1 without (default); H200
        # (cuDNN autotuner on) 96.8, 82.0, 59.6
        out.COMPILE = False
        notes.append("COMPILE False (auto: the eager step, measured fastest)")
    if out.COMPILE_MODE == "auto":
        # one GPU: a 100-iteration training run on an H100 with reduce-overhead recorded its graphs in the warm-up
        # only and fell back to nothing (make gpu-check's compiled_training, docs/benchmarks.md); several GPUs in
        # that mode have not run, and a failed capture of the backward ends a run of several ranks
        graphs = out.COMPILE and cuda and out.COMPILE_BACKEND == "inductor"
        out.COMPILE_MODE = "reduce-overhead" if graphs and world_size == 1 else "default"
        notes.append(f"COMPILE_MODE {out.COMPILE_MODE} (auto: " + (
            "CUDA graphs)" if out.COMPILE_MODE != "default" else
            "no CUDA graphs: several processes, not yet run with them)" if graphs else
            "no CUDA graphs: not compiling with inductor on CUDA)"))
    if out.DATALOADER.STATIC_POLYGON_SLOTS is None:
        out.DATALOADER.STATIC_POLYGON_SLOTS = polygon_slots(out, out.COMPILE_MODE if out.COMPILE else "none",
                                                            "cuda" if cuda else "cpu")
        if out.DATALOADER.STATIC_POLYGON_SLOTS != POLYGON_SLOTS:  # a step with CUDA graphs
            notes.append(f"DATALOADER.STATIC_POLYGON_SLOTS {out.DATALOADER.STATIC_POLYGON_SLOTS} (auto: CUDA graphs "
                         "record one graph per polygon padding)")
    if out.DATALOADER.HYBRID is None:
        out.DATALOADER.HYBRID = cuda
        notes.append(f"DATALOADER.HYBRID {out.DATALOADER.HYBRID} (auto)")
    if NUM_CLASSES_KEY not in given_keys(cfg):
        n, what = num_classes_from_data(out, is_train)
        out.MODEL.ROI_BOX_HEAD.NUM_CLASSES = n
        notes.append(f"{NUM_CLASSES_KEY} {n} (not set: from the {'training' if is_train else 'test'} data, "
                     f"{what}, + background)")
        _note_given(out, {NUM_CLASSES_KEY})  # resolved: a second resolve reads no data
    out.freeze()
    per_gpu = out.SOLVER.IMS_PER_BATCH // max(int(world_size), 1)
    logger.info("resolved for %s, %d process(es), %d training images per process: %s", device, world_size, per_gpu,
                "; ".join(notes) if notes else "nothing automatic")
    return out
