"""Checkpoints: the reference's ``Checkpointer``/``DetectronCheckpointer`` API, atomic saves, safe loads.

``Checkpointer(model, optimizer, scheduler, save_dir, save_to_disk)`` has the reference's ``save``,
``has_checkpoint``, ``get_checkpoint_file`` and ``tag_last_checkpoint``, and two ways to load, each named for
what it restores: :meth:`DetectronCheckpointer.load_weights` (the model only) and :meth:`Checkpointer.resume`
(everything a run needs to continue exactly); the reference's ``load(f=None)``, which picked the folder's last
checkpoint when given none, is not kept: nothing resumes by surprise. Differences, on purpose: files are written
atomically (temp file + rename, so a kill never leaves a half-written checkpoint); they are read with
``torch.load(weights_only=True)`` (a checkpoint cannot run code); they record the run's recipe (:data:`RECIPE_KEYS`),
and resuming under another one is refused; loading for evaluation (``complete=True``) takes only a file that sets
every tensor of the model. Keys load through
:func:`~maskrcnn_benchmark.utils.model_serialization.load_state_dict` (``module.`` prefixes, suffix matching, this package's 0.1.0 names).

The trainer uses :meth:`DetectronCheckpointer.load_weights` for ``MODEL.WEIGHT`` (weights only: a Detectron
``.pkl`` or any torch checkpoint) and :meth:`Checkpointer.resume` for ``--resume`` (model, optimizer, LR
schedule, gradient scaler, and the extra state the trainer saved; :meth:`DetectronCheckpointer.resume` first compares
the recorded recipe).
"""
import logging
import os
import warnings

import torch

from .c2_model_loading import WeightsError, c2_name_to_ours, load_c2_weights, require_backbone
from .fileio import atomic_write, write_text
from .imports import resolve_weights
from .model_serialization import load_state_dict
from .run_folder import last_checkpoint_in


def _show(value):
    return f"({', '.join(map(str, value))})" if isinstance(value, (list, tuple)) else str(value)


def _same_value(a, b):
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b) and \
            all(_same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return a == b


class _KeepWriteErrors:
    """The file torch.save writes into, remembering the OSError of a failed write: torch's zip writer turns it
    into an unhelpful RuntimeError ("unexpected pos ..."), which a full disk should not read like."""

    def __init__(self, f):
        self.f = f
        self.error = None

    def write(self, data):
        try:
            return self.f.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self):
        self.f.flush()


def atomic_torch_save(obj, path, what="checkpoint"):
    """``torch.save`` through :func:`~maskrcnn_benchmark.utils.fileio.atomic_write`: readers see the old file
    or the complete new one, never a half-written checkpoint; a failed write names the file."""
    with atomic_write(path, "wb", what=what) as f:
        sink = _KeepWriteErrors(f)
        try:
            torch.save(obj, sink)
        except RuntimeError:
            if sink.error is not None:
                raise sink.error from None
            raise


def load_torch_checkpoint(path):
    """``torch.load(weights_only=True)`` with one-line errors that name the file (and never suggest
    ``weights_only=False``)."""
    try:
        with warnings.catch_warnings():  # torch's multi-line notes on old pickle protocols: not for the terminal
            warnings.simplefilter("ignore", UserWarning)
            return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise WeightsError(f"weights file '{path}' does not exist") from None
    except IsADirectoryError:
        raise WeightsError(f"weights file '{path}' is a directory") from None
    except PermissionError:
        raise WeightsError(f"weights file '{path}' is not readable (permission denied)") from None
    except Exception as e:  # noqa: BLE001 - torch raises many kinds for a bad file
        msg = str(e)
        # "Unsupported global": a class torch's safe unpickler refuses; "Unsupported operand": an opcode it does
        # not know, i.e. bytes that are no pickle of a checkpoint (random bytes, another format)
        if ("weights_only" in msg or "Unsupported global" in msg) and "Unsupported operand" not in msg:
            raise WeightsError(f"weights file '{path}' holds Python objects other than tensors and plain "
                               "containers; refusing to load it (it could run code)") from None
        raise WeightsError(f"weights file '{path}' is not a torch checkpoint (truncated or another format)") \
            from None


class Checkpointer:
    def __init__(self, model, optimizer=None, scheduler=None, save_dir="", save_to_disk=None, logger=None,
                 scaler=None):
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.scaler = scaler
        self.save_dir = save_dir
        self.save_to_disk = save_to_disk
        self.logger = logger or logging.getLogger(__name__)

    def _model(self):
        return self.model.module if hasattr(self.model, "module") else self.model

    # -- saving ---------------------------------------------------------------------------------------------
    def save(self, name, **kwargs):
        if not self.save_dir or not self.save_to_disk:
            return None
        data = {"model": self._model().state_dict()}
        if self.optimizer is not None:
            data["optimizer"] = self.optimizer.state_dict()
        if self.scheduler is not None:
            data["scheduler"] = self.scheduler.state_dict()
        if self.scaler is not None and self.scaler.is_enabled():
            data["scaler"] = self.scaler.state_dict()
        data.update(kwargs)
        path = os.path.join(self.save_dir, f"{name}.pth")
        atomic_torch_save(data, path)
        self.tag_last_checkpoint(os.path.abspath(path))  # a relative OUTPUT_DIR means nothing from elsewhere
        self.logger.info("saved checkpoint %s", path)
        return path

    def tag_last_checkpoint(self, last_filename):
        write_text(os.path.join(self.save_dir, "last_checkpoint"), last_filename, what="checkpoint tag")

    def has_checkpoint(self):
        return bool(self.save_dir) and os.path.exists(os.path.join(self.save_dir, "last_checkpoint"))

    def get_checkpoint_file(self):
        """The file ``last_checkpoint`` names (:func:`~maskrcnn_benchmark.utils.run_folder.last_checkpoint_in`)."""
        return last_checkpoint_in(self.save_dir)

    # -- loading --------------------------------------------------------------------------------------------
    def _load_file(self, f):
        return load_torch_checkpoint(f)

    def _load_model(self, checkpoint, path):
        state = checkpoint.pop("model", None) if isinstance(checkpoint, dict) else None
        if state is None and isinstance(checkpoint, dict) and checkpoint and \
                all(isinstance(v, torch.Tensor) for v in checkpoint.values()):
            state = dict(checkpoint)  # a bare state dict
            checkpoint.clear()
        if not isinstance(state, dict):
            raise WeightsError(f"weights file '{path}' holds no model state dict")
        try:
            matched, unmatched, _ = load_state_dict(self._model(), state, self.logger)
        except (ValueError, RuntimeError) as e:
            raise WeightsError(f"weights file '{path}' does not fit this model: {str(e).splitlines()[0]}") \
                from None
        require_backbone(self._model().state_dict(), matched, path,
                         f"its names match {len(matched)} of the model's): the file's tensor names do not fit "
                         "this model's (backbone.body.stem.conv1.weight, or a torchvision ResNet's conv1.weight)")
        return unmatched

    def _load_into_model(self, path, complete=False):
        checkpoint = self._load_file(path)
        if not isinstance(checkpoint, dict):
            raise WeightsError(f"weights file '{path}' holds a {type(checkpoint).__name__}, not a checkpoint")
        unmatched = self._load_model(checkpoint, path)
        if complete and unmatched:
            raise WeightsError(f"weights file '{path}' leaves {len(unmatched)} of the model's tensors unset (e.g. "
                               f"{', '.join(unmatched[:3])}): evaluating needs a trained detector's checkpoint "
                               "(OUTPUT_DIR/model_final.pth)")
        return checkpoint

    def _load_training_state(self, checkpoint, path):
        """Loads the optimizer, LR schedule and gradient scaler states the checkpoint holds into those of this run;
        returns the names of those restored."""
        restored = []
        parts = (("optimizer", self.optimizer, "optimizer"), ("scheduler", self.scheduler, "LR schedule"),
                 ("scaler", self.scaler, "gradient scaler"))
        for key, obj, name in parts:
            state = checkpoint.pop(key, None)
            if obj is None or state is None or (key == "scaler" and not obj.is_enabled()):
                continue  # a disabled GradScaler ignores a state (float16's, resumed in another DTYPE: refused)
            try:
                obj.load_state_dict(state)
            except (ValueError, KeyError, RuntimeError) as e:
                raise WeightsError(f"checkpoint '{path}': its {key} state does not fit this run: "
                                   f"{str(e).splitlines()[0]}") from None
            restored.append(name)
        return restored

    def resume(self, path):
        """Restore model, optimizer, LR schedule and gradient scaler from a checkpoint this trainer wrote;
        returns its extra entries (iteration, RNG and sampler state)."""
        return self._resume_loaded(load_torch_checkpoint(path), path)

    def _resume_loaded(self, data, path):
        if not isinstance(data, dict) or "model" not in data:
            raise WeightsError(f"'{path}' is not a training checkpoint (no 'model' entry)")
        # an exact continuation needs every piece: a tensor left at its initialization, or a schedule restarted,
        # is another run
        for key, obj in (("optimizer", self.optimizer), ("scheduler", self.scheduler)):
            if obj is not None and key not in data:
                raise WeightsError(f"'{path}' has no {key} state: it holds weights, not a training checkpoint "
                                   "(use MODEL.WEIGHT to start from it)")
        unmatched = self._load_model(data, path)
        if unmatched:
            raise WeightsError(f"checkpoint '{path}' leaves {len(unmatched)} of the model's tensors unset (e.g. "
                               f"{', '.join(unmatched[:3])}): not a checkpoint of this model; --resume continues "
                               "a run exactly (MODEL.WEIGHT to start from its weights)")
        restored = self._load_training_state(data, path)
        listed = ", ".join(restored[:-1]) + " and " + restored[-1] if len(restored) > 1 else "".join(restored)
        self.logger.warning("RESUMED from %s (%s restored)", path, listed or "nothing but the weights")
        return data


# What --resume restores from the checkpoint rather than from the config (the optimizer's, the LR schedule's and
# float16's gradient scaler's state): the run's recipe, recorded in its checkpoints and compared on resume.
# MAX_ITER may grow.
RECIPE_KEYS = ("DTYPE", "SOLVER.IMS_PER_BATCH", "SOLVER.BASE_LR", "SOLVER.BIAS_LR_FACTOR", "SOLVER.MOMENTUM",
               "SOLVER.WEIGHT_DECAY", "SOLVER.WEIGHT_DECAY_BIAS", "SOLVER.GAMMA", "SOLVER.STEPS",
               "SOLVER.WARMUP_FACTOR", "SOLVER.WARMUP_ITERS", "SOLVER.WARMUP_METHOD")


def recipe_of(cfg):
    """``{key: value}`` of :data:`RECIPE_KEYS` (lists for tuples: what a weights-only load reads back)."""
    out = {}
    for key in RECIPE_KEYS:
        node = cfg
        for part in key.split("."):
            node = node[part]
        out[key] = list(node) if isinstance(node, (tuple, list)) else node
    return out


class DetectronCheckpointer(Checkpointer):
    """``DetectronCheckpointer(cfg, model, ...)``: also reads Detectron ``.pkl`` weights (through the restricted
    unpickler) and ``catalog://`` names. Its checkpoints record the run's recipe (:data:`RECIPE_KEYS`); resuming
    one under another recipe is refused by key: the optimizer and the LR schedule would continue the saved
    recipe while the MLPerf log states the config's (and under another DTYPE, float16's gradient scaler would
    restart or be dropped)."""

    def __init__(self, cfg, model, optimizer=None, scheduler=None, save_dir="", save_to_disk=None, logger=None,
                 scaler=None):
        super().__init__(model, optimizer, scheduler, save_dir, save_to_disk, logger, scaler)
        self.cfg = cfg

    def save(self, name, **kwargs):
        if self.cfg is not None:
            kwargs.setdefault("recipe", recipe_of(self.cfg))
        return super().save(name, **kwargs)

    def resume(self, path):
        data = load_torch_checkpoint(path)
        saved = data.get("recipe") if isinstance(data, dict) else None
        if self.cfg is not None and isinstance(data, dict) and "model" in data:
            if saved is None:
                self.logger.warning("checkpoint %s records no recipe (an earlier release's): resumed with its own "
                                    "optimizer and LR schedule state, whatever this config's SOLVER values",
                                    path)
            else:
                ours = recipe_of(self.cfg)
                differ = [f"{k} {_show(ours[k])} (the checkpoint's run: {_show(saved[k])})"
                          for k in RECIPE_KEYS if k in saved and not _same_value(ours[k], saved[k])]
                if differ:
                    raise WeightsError(f"checkpoint '{path}' was saved by a run with another recipe: "
                                       f"{'; '.join(differ)}; --resume continues that run's optimizer, LR "
                                       "schedule and gradient scaler, so resume with its values, or start a new run from its weights "
                                       f"(MODEL.WEIGHT {path})")
        return self._resume_loaded(data, path)

    def _resolve(self, path):
        return resolve_weights(self.cfg, path)

    def _load_file(self, f):
        f = self._resolve(f)
        if f.endswith(".pkl"):
            return {"c2_pickle": f}
        return super()._load_file(f)

    def _load_model(self, checkpoint, path):
        if "c2_pickle" in checkpoint:
            blobs = load_c2_weights(self._model(), checkpoint.pop("c2_pickle"), self.logger)[0]
            loaded = {c2_name_to_ours(b) for b in blobs}
            # a Detectron pickle's BN is its scale and bias (FrozenBatchNorm2d keeps mean 0, variance 1)
            return [k for k in self._model().state_dict() if k not in loaded and ".cell_anchors." not in k
                    and not k.endswith(("running_mean", "running_var", "num_batches_tracked"))]
        self._warn_if_torchvision_resnet(checkpoint, path)
        return super()._load_model(checkpoint, path)

    def _warn_if_torchvision_resnet(self, checkpoint, path):
        """A torchvision ResNet's ImageNet weights load by their names' suffixes, as the reference loads them, but
        were trained on RGB in [0, 1] over ImageNet's std with the stride in the 3x3 convolution: under Detectron's
        input conventions (the MLPerf config's, for the MSRA R-50.pkl) they train a worse model without a word."""
        state = checkpoint.get("model", checkpoint) if isinstance(checkpoint, dict) else None
        names = {n[len("module."):] if n.startswith("module.") else n for n in state} if isinstance(state, dict) \
            else set()
        if self.cfg is None or "conv1.weight" not in names or not any(n.startswith("layer1.") for n in names):
            return
        cfg = self.cfg
        msra = [f"{k} {v}" for k, v in (("MODEL.RESNETS.STRIDE_IN_1X1", cfg.MODEL.RESNETS.STRIDE_IN_1X1),
                                         ("INPUT.TO_BGR255", cfg.INPUT.TO_BGR255)) if v]
        if any(m > 1.0 for m in cfg.INPUT.PIXEL_MEAN):
            msra.append("INPUT.PIXEL_MEAN on the 0-255 scale")
        if list(cfg.INPUT.PIXEL_STD) == [1.0, 1.0, 1.0]:
            msra.append("INPUT.PIXEL_STD [1, 1, 1]")
        if msra:
            self.logger.warning(
                "weights file '%s' has a torchvision ResNet's names (conv1.weight, layer1...): if they are "
                "torchvision's ImageNet weights, they expect RGB in [0, 1] over ImageNet's mean and std and the "
                "stride in the 3x3 convolution, and this config has Detectron's conventions (%s): set "
                "MODEL.RESNETS.STRIDE_IN_1X1 False, INPUT.TO_BGR255 False, INPUT.PIXEL_MEAN [0.485, 0.456, 0.406], "
                "INPUT.PIXEL_STD [0.229, 0.224, 0.225] for them, or use Detectron's R-50.pkl (the MLPerf "
                "reference's); caffe-style weights of these names are right as they are", path, ", ".join(msra))

    def load_weights(self, path, complete=False):
        """Model weights only (``MODEL.WEIGHT``): a Detectron ``.pkl``, a ``catalog://`` name or any torch
        checkpoint (its optimizer state is ignored). Returns the checkpoint's other entries. ``complete``: every
        tensor of the model must come from the file (evaluation, prediction: an ImageNet backbone such as
        R-50.pkl, or no weights at all, would score a model with random heads)."""
        if not path:
            if complete:
                raise WeightsError("no weights to evaluate: no checkpoint given and MODEL.WEIGHT is empty; give a "
                                   "trained one (OUTPUT_DIR/model_final.pth: test_net's --ckpt, predict's --weights)")
            self.logger.info("no weights given: the model keeps its initialization")
            return {}
        checkpoint = self._load_into_model(path, complete)
        return {k: v for k, v in checkpoint.items() if k not in ("optimizer", "scheduler", "scaler")}

