"""Checkpoints: atomic saves, weights-only loads, explicit resume.

``DetectronCheckpointer.load(path)`` loads *weights* (a Detectron ``.pkl`` through the restricted unpickler, or
a torch checkpoint with ``weights_only=True``). Optimizer/scheduler state is restored only by ``resume()``,
which the trainer calls when the user asks for it, never implicitly from a stale ``last_checkpoint``.
"""
import logging
import os
import tempfile

import torch

from .c2_model_loading import WeightsError, load_c2_weights


def atomic_torch_save(obj, path):
    """Write ``obj`` to ``path`` through a temp file in the same folder and ``os.replace``: readers see
    either the old file or the complete new one, never a half-written checkpoint."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".pth", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _strip_module_prefix(state):
    if state and all(k.startswith("module.") for k in state):
        return {k[len("module."):]: v for k, v in state.items()}
    return state


def load_torch_checkpoint(path):
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise WeightsError(f"weights file '{path}' does not exist") from None
    except Exception as e:
        raise WeightsError(f"cannot load weights file '{path}': {str(e).splitlines()[0]}") from None


class DetectronCheckpointer:
    def __init__(self, cfg, model, optimizer=None, scheduler=None, save_dir="", save_to_disk=True,
                 logger=None):
        self.cfg = cfg
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.save_dir = save_dir
        self.save_to_disk = save_to_disk
        self.logger = logger or logging.getLogger(__name__)

    def _model(self):
        return self.model.module if hasattr(self.model, "module") else self.model

    def save(self, name, **extra):
        if not self.save_dir or not self.save_to_disk:
            return None
        data = {"model": self._model().state_dict(), **extra}
        if self.optimizer is not None:
            data["optimizer"] = self.optimizer.state_dict()
        if self.scheduler is not None:
            data["scheduler"] = self.scheduler.state_dict()
        path = os.path.join(self.save_dir, f"{name}.pth")
        atomic_torch_save(data, path)
        with open(os.path.join(self.save_dir, ".last_checkpoint.tmp"), "w") as f:
            f.write(path)
        os.replace(os.path.join(self.save_dir, ".last_checkpoint.tmp"), os.path.join(self.save_dir,
                                                                                     "last_checkpoint"))
        self.logger.info("saved checkpoint %s", path)
        return path

    def last_checkpoint(self):
        marker = os.path.join(self.save_dir, "last_checkpoint")
        if not os.path.exists(marker):
            return None
        with open(marker) as f:
            return f.read().strip() or None

    def load(self, path):
        """Load model weights only. ``.pkl`` -> Detectron blobs; anything else -> torch checkpoint."""
        if not path:
            self.logger.info("no weights given: the model keeps its initialization")
            return {}
        if path.startswith("catalog://"):
            from ..config.paths_catalog import resolve_model_url  # lazy: the catalog is optional

            path = resolve_model_url(self.cfg, path)
        if path.endswith(".pkl"):
            load_c2_weights(self._model(), path, self.logger)
            return {}
        data = load_torch_checkpoint(path)
        state = data.get("model", data) if isinstance(data, dict) else None
        if not isinstance(state, dict):
            raise WeightsError(f"weights file '{path}' holds no model state dict")
        missing, unexpected = self._model().load_state_dict(_strip_module_prefix(state), strict=False)
        if missing:
            self.logger.warning("weights file %s misses %d model tensors: %s", path, len(missing),
                                ", ".join(missing[:10]))
        if unexpected:
            self.logger.warning("weights file %s has %d tensors the model does not use", path, len(unexpected))
        return {k: v for k, v in data.items() if k not in ("model", "optimizer", "scheduler")}

    def resume(self, path):
        """Restore model, optimizer and scheduler from a checkpoint we wrote; returns its extra data."""
        data = load_torch_checkpoint(path)
        if not isinstance(data, dict) or "model" not in data:
            raise WeightsError(f"'{path}' is not a training checkpoint (no 'model' entry)")
        self._model().load_state_dict(_strip_module_prefix(data["model"]))
        if self.optimizer is not None and "optimizer" in data:
            self.optimizer.load_state_dict(data["optimizer"])
        if self.scheduler is not None and "scheduler" in data:
            self.scheduler.load_state_dict(data["scheduler"])
        self.logger.warning("RESUMED from %s (optimizer and LR schedule state restored)", path)
        return {k: v for k, v in data.items() if k not in ("model", "optimizer", "scheduler")}
