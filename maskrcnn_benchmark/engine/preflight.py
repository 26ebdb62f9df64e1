"""What can be known before a run starts, checked before ``init_start``: each cause its own error and exit code.

A bad data path found after the model is built (on a GPU: after compiling) costs minutes on every rank of every
trial; found here it costs a second. :func:`check_before_init` is called by the trainer before it logs
``init_start``, and by ``tools/preflight.py`` (which ``run_and_time.sh`` and the Slurm job run before any rank
starts, on the batch host first). It reads no image and no annotation: it only looks whether the files the
config names exist (the MLPerf rules start the clock before the dataset is touched).

Each failure is a :class:`~maskrcnn_benchmark.utils.errors.PreflightError` whose message names the key, the path
or the numbers, and what to do:

=======================  =======================================================================================
``BatchNotDivisible``    ``SOLVER.IMS_PER_BATCH`` or ``TEST.IMS_PER_BATCH`` not divisible by the processes
``DatasetMissing``       an annotation file or image folder of ``DATASETS.TRAIN``/``TEST`` does not exist
``WeightsMissing``       ``MODEL.WEIGHT`` (or, resuming, ``--resume``) names a file that does not exist
``NoGPU``                ``MODEL.DEVICE`` is cuda and torch sees no GPU (the driver line says why, when known)
``TooFewGPUs``           fewer GPUs on this node than processes to start on it
``ConfigError``          ``DATASETS.TEST`` does not name one dataset (the run scores one); ``MODEL.MASK_ON`` is
                         False (the run stops on mask AP too); the submission status
                         (``MLPERF_SUBMISSION_STATUS``) is not one mlperf-logging accepts; the COCO scoring
                         backend asked for (``TEST.COCO_BACKEND``, ``--coco-backend``) is not
                         installed: the first evaluation would fail, after ``run_start`` and an epoch
=======================  =======================================================================================
"""
import importlib.util
import os
import shutil
import subprocess

from ..data.catalog import dataset_paths
from ..utils.imports import resolve_weights
from ..utils.mlperf_logger import SUBMISSION_STATUSES, submission_status
from ..utils.run_folder import last_checkpoint_in
from ..utils.errors import BatchNotDivisible, ConfigError, DatasetMissing, NoGPU, TooFewGPUs, WeightsMissing

__all__ = ["check_before_init", "check_batch", "check_data", "check_weights", "check_resume", "check_gpus",
           "check_scoring", "check_test_set", "check_masks", "check_submission_status", "resume_checkpoint"]


def check_batch(cfg, world_size):
    for key, value in (("SOLVER.IMS_PER_BATCH", cfg.SOLVER.IMS_PER_BATCH), ("TEST.IMS_PER_BATCH",
                                                                          cfg.TEST.IMS_PER_BATCH)):
        if value % world_size:
            raise BatchNotDivisible(
                f"{key} ({value}) is not divisible by the number of processes ({world_size}): every process "
                f"takes the same number of images; use a multiple of {world_size} or another number of GPUs")


def check_test_set(cfg):
    names = tuple(cfg.DATASETS.TEST)
    if len(names) != 1:
        raise ConfigError(f"DATASETS.TEST {names}: a training run must name one dataset, the validation set it "
                          "scores every epoch and stops on (MLPerf's eval_accuracy); evaluate others with "
                          "tools/test_net.py")


def check_masks(cfg):
    if not cfg.MODEL.MASK_ON:
        raise ConfigError("MODEL.MASK_ON False: a training run scores box and mask AP every epoch and stops when "
                          "both meet their targets (MLPerf's Mask R-CNN), so a model without masks never stops "
                          "before SOLVER.MAX_ITER; set MODEL.MASK_ON True")


def check_submission_status(environ=None):
    """MLPERF_SUBMISSION_STATUS and MLPERF_SUBMISSION_DIVISION, which the run logs, are values the compliance
    checker accepts (a trainer started without tools/preflight.py logged any)."""
    status = submission_status(environ)
    if status not in SUBMISSION_STATUSES:
        raise ConfigError(f"MLPERF_SUBMISSION_STATUS '{status}' is not a submission status mlperf-logging accepts: "
                          f"{', '.join(SUBMISSION_STATUSES)}")
    division = (os.environ if environ is None else environ).get("MLPERF_SUBMISSION_DIVISION", "").strip()
    if division not in ("", "closed", "open"):
        raise ConfigError(f"MLPERF_SUBMISSION_DIVISION '{division}' is neither closed nor open (the values "
                          "mlperf-logging accepts)")


def check_data(cfg):
    for key, name, images, annotations in dataset_paths(cfg):
        where = f" (DATASETS.DATA_DIR '{cfg.DATASETS.DATA_DIR}')" if cfg.DATASETS.DATA_DIR else ""
        if annotations and not os.path.isfile(annotations):
            raise DatasetMissing(f"the annotation file '{annotations}' of {key} '{name}' does not exist{where}; "
                                 "check the data path (tools/download_coco.py --verify-only --out DIR)")
        if images and not os.path.isdir(images):
            raise DatasetMissing(f"the image folder '{images}' of {key} '{name}' does not exist{where}; "
                                 "check the data path (tools/download_coco.py --verify-only --out DIR)")


def check_weights(cfg):
    if not cfg.MODEL.WEIGHT:
        return
    path = resolve_weights(cfg, cfg.MODEL.WEIGHT)
    if not os.path.isfile(path):
        given = "" if path == cfg.MODEL.WEIGHT else f" (MODEL.WEIGHT '{cfg.MODEL.WEIGHT}')"
        raise WeightsMissing(f"the weights file MODEL.WEIGHT '{path}'{given} does not exist (R-50.pkl: "
                             "tools/download_coco.py --weights-dir DIR)")


def _nvidia_devices():
    """NVIDIA GPUs the kernel shows (``/dev/nvidia<N>``), whether or not torch can use them."""
    try:
        return sorted(n for n in os.listdir("/dev") if n.startswith("nvidia") and n[6:].isdigit())
    except OSError:
        return []


def _driver_version():
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        r = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    versions = r.stdout.split()
    return versions[0] if r.returncode == 0 and versions else None


def check_gpus(cfg, local_world_size, cuda=None):
    """On a CUDA config, this node must show torch at least ``local_world_size`` GPUs. ``cuda`` (tests) stands in
    for ``torch.cuda``."""
    if not str(cfg.MODEL.DEVICE).startswith("cuda"):
        return
    if cuda is None:
        import torch
        cuda = torch.cuda
    count = cuda.device_count() if cuda.is_available() else 0
    if count == 0:
        devices, driver = _nvidia_devices(), _driver_version()
        if devices or driver:
            raise NoGPU(f"MODEL.DEVICE is cuda and this node has NVIDIA GPUs ({len(devices)} device files"
                        f"{f', driver {driver}' if driver else ''}), but torch cannot use them: torch "
                        f"{_torch_cuda()} needs a newer driver, or the container was started without --nv")
        raise NoGPU("MODEL.DEVICE is cuda but no GPU is visible on this node (CUDA_VISIBLE_DEVICES="
                    f"'{os.environ.get('CUDA_VISIBLE_DEVICES', '')}'); set MODEL.DEVICE cpu for a CPU run, or "
                    "ask Slurm for GPUs (--gpus-per-node)")
    per_task = _gpus_per_task()
    if per_task:  # srun --gpus-per-task: each task sees its own GPUs, not the node's (comm: local rank % count)
        if count < per_task:
            raise TooFewGPUs(f"srun --gpus-per-task={per_task} but torch sees {count} GPU(s) in this task "
                             f"(CUDA_VISIBLE_DEVICES='{os.environ.get('CUDA_VISIBLE_DEVICES', '')}')")
        return
    if count < local_world_size:
        raise TooFewGPUs(f"{local_world_size} processes per node but torch sees {count} GPU(s) here: two ranks "
                         f"would share a GPU; set DGXNGPU (--nproc_per_node) to {count} or run on nodes with "
                         f"{local_world_size} GPUs")


def _gpus_per_task():
    """The GPUs Slurm gives each task of this srun step (``--gpus-per-task``: SLURM_GPUS_PER_TASK, ``N`` or
    ``type:N``), else 0."""
    if not os.environ.get("SLURM_STEP_NUM_TASKS", "").strip():  # an allocation's shell: no task of a step
        return 0
    value = os.environ.get("SLURM_GPUS_PER_TASK", "").strip().rsplit(":", 1)[-1]
    return int(value) if value.isdigit() else 0


def _torch_cuda():
    import torch
    return f"{torch.__version__} (CUDA {torch.version.cuda})"


def resume_checkpoint(path):
    """``--resume PATH``: a checkpoint file, or a run's folder (or its ``last_checkpoint`` tag), which names the
    folder's last checkpoint, the one the reference's trainer resumed from by itself."""
    folder = path if os.path.isdir(path) else os.path.dirname(path) if os.path.basename(path) == "last_checkpoint" \
        else None
    if folder is None:
        return path
    found = last_checkpoint_in(folder)
    if not found:
        raise WeightsMissing(f"--resume '{path}': {folder or '.'} names no checkpoint (no last_checkpoint there: a "
                             "run writes OUTPUT_DIR/model_<iteration>.pth with SAVE_CHECKPOINTS True); give the "
                             "checkpoint file")
    return found


def check_resume(path):
    """``--resume``: the checkpoint the run continues from (MODEL.WEIGHT is then never read)."""
    path = resume_checkpoint(path)
    if not os.path.isfile(path):
        raise WeightsMissing(f"the checkpoint --resume '{path}' does not exist (OUTPUT_DIR/model_<iteration>.pth "
                             "of the interrupted run, written with SAVE_CHECKPOINTS True)")


def check_scoring(backend, key="TEST.COCO_BACKEND"):
    """The COCO scoring backend can be loaded (found, not imported: the check stays cheap). ``auto`` takes
    pycocotools, the reference's, where faster-coco-eval is not installed; one named is needed."""
    module = {"faster_coco_eval": "faster_coco_eval", "pycocotools": "pycocotools", "auto": "pycocotools"}[backend]
    if importlib.util.find_spec(module) is None:
        package = module.replace("_", "-")
        raise ConfigError(f"{key} {backend}: the package {package}, which scores every epoch's AP, is not installed "
                          f"in this Python: pip install {package}"
                          + (", or TEST.COCO_BACKEND auto" if backend != "auto" else ""))


def check_before_init(cfg, world_size, local_world_size=1, cuda=None, resume="", gpus_here=True, coco_backend=""):
    """Every check above, cheapest first; ``resume``: the checkpoint of ``--resume`` (its weights replace
    MODEL.WEIGHT's); ``gpus_here`` False: this host only submits (a login node), the GPUs are the job's nodes';
    ``coco_backend``: ``--coco-backend`` (else TEST.COCO_BACKEND)."""
    check_batch(cfg, world_size)
    check_test_set(cfg)
    check_masks(cfg)
    check_submission_status()
    check_scoring(coco_backend or cfg.TEST.COCO_BACKEND, "--coco-backend" if coco_backend else "TEST.COCO_BACKEND")
    if gpus_here:
        check_gpus(cfg, local_world_size, cuda)
    check_data(cfg)
    if resume:
        check_resume(resume)
    else:
        check_weights(cfg)
