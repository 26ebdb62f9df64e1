"""Loading MSRA/Detectron Caffe2 weights (``R-50.pkl``) into our ResNet, safely.

A pickle can run arbitrary code when loaded, and these files come from the internet. We read them with an
unpickler that only reconstructs plain containers and numpy arrays; anything else (a function, a class, a
module) is refused with a :class:`WeightsError` naming the file and the global it tried to load.
"""
import io
import pickle
import re

import numpy as np
import torch

from .errors import WeightsError


_ALLOWED = {
    ("collections", "OrderedDict"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"),
    ("builtins", "dict"), ("builtins", "list"), ("builtins", "tuple"), ("builtins", "set"),
    ("builtins", "frozenset"), ("builtins", "bytearray"), ("builtins", "complex"),
    ("_codecs", "encode"),  # how protocol-2 pickles written by Python 3 store bytes
    ("__builtin__", "dict"), ("__builtin__", "list"), ("__builtin__", "tuple"), ("__builtin__", "set"),
}


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, f, path):
        super().__init__(f, encoding="latin1")
        self._path = path

    def find_class(self, module, name):
        if (module, name) in _ALLOWED:
            return super().find_class("builtins" if module == "__builtin__" else module, name)
        raise WeightsError(f"refusing to load '{self._path}': the pickle references {module}.{name}, "
                           "which is not a plain container or numpy array (possibly malicious)")


def load_c2_pickle(path):
    """Blob name -> numpy array from a Detectron ``.pkl`` (``{"blobs": {...}}`` or a flat dict)."""
    try:
        with open(path, "rb") as f:
            data = _RestrictedUnpickler(io.BytesIO(f.read()), path).load()
    except OSError as e:
        raise WeightsError(f"cannot read weights file '{path}': {e.strerror}") from None
    except WeightsError:
        raise
    except Exception as e:  # truncated or not a pickle at all
        raise WeightsError(f"weights file '{path}' is not a valid pickle: {e}") from None
    if isinstance(data, dict) and "blobs" in data:
        data = data["blobs"]
    if not isinstance(data, dict):
        raise WeightsError(f"weights file '{path}' holds a {type(data).__name__}, expected a dict of blobs")
    return {k: v for k, v in data.items() if isinstance(v, np.ndarray) and not k.endswith("_momentum")}


_BN_SUFFIX = {"s": "weight", "b": "bias"}


def c2_name_to_ours(name, prefix="backbone.body."):
    """Map an MSRA ResNet blob name to our parameter name, or None when it is not part of the body."""
    if name == "conv1_w":
        return prefix + "stem.conv1.weight"
    m = re.fullmatch(r"res_conv1_bn_(s|b)", name)
    if m:
        return prefix + f"stem.bn1.{_BN_SUFFIX[m.group(1)]}"
    m = re.fullmatch(r"res(\d)_(\d+)_branch(1|2[abc])_(w|bn_s|bn_b)", name)
    if not m:
        return None
    stage, block, branch, kind = int(m.group(1)), int(m.group(2)), m.group(3), m.group(4)
    base = f"{prefix}layer{stage - 1}.{block}."
    if branch == "1":
        module = base + ("downsample.0" if kind == "w" else "downsample.1")
    else:
        idx = "abc".index(branch[1]) + 1
        module = base + (f"conv{idx}" if kind == "w" else f"bn{idx}")
    return module + (".weight" if kind in ("w", "bn_s") else ".bias")


def load_c2_weights(model, path, logger=None):
    """Copy the ResNet weights of a Detectron pickle into ``model``.

    Returns ``(loaded, unmatched_in_file, missing_in_model)`` name lists; unmatched file blobs (e.g. the
    ``fc1000`` classifier, Caffe2's conv biases) are logged; a body tensor the file does not provide is a
    :class:`WeightsError` (so ``missing_in_model`` is empty).
    """
    blobs = load_c2_pickle(path)
    state = model.state_dict()
    loaded, unmatched = [], []
    new_state = {}
    for name, value in sorted(blobs.items()):
        ours = c2_name_to_ours(name)
        if ours is None or ours not in state:
            unmatched.append(name)
            continue
        tensor = torch.from_numpy(np.ascontiguousarray(value)).to(state[ours].dtype)
        if tensor.shape != state[ours].shape:
            raise WeightsError(f"weights file '{path}': blob '{name}' has shape {tuple(tensor.shape)}, "
                               f"model expects {tuple(state[ours].shape)} for '{ours}'")
        new_state[ours] = tensor
        loaded.append(name)
    require_backbone(state, new_state, path, f"it provided {len(loaded)} blobs): not a Detectron/MSRA ResNet "
                     "pickle of this depth (R-50.pkl's blobs are named conv1_w, res_conv1_bn_s, res2_0_branch2a_w, "
                     "...")
    model.load_state_dict(new_state, strict=False)
    if logger is not None:
        logger.info("loaded %d blobs from %s", len(loaded), path)
        if unmatched:
            logger.info("blobs in %s not used by the model: %s", path, ", ".join(unmatched))
    return loaded, unmatched, []  # missing_in_model: refused above


def require_backbone(model_state, loaded, path, detail):
    """Refuse weights that leave a tensor of the ResNet body unset (its FrozenBN statistics aside: a Detectron
    pickle has none, they stay mean 0, variance 1). A backbone left at its initialization never recovers: its
    frozen BN stays the identity and the frozen stages (FREEZE_CONV_BODY_AT) never learn; the run would only
    fail to converge, hours later. ``loaded``: the model's names the file set."""
    body = [k for k in model_state if k.startswith("backbone.body.")
            and not k.endswith(("running_mean", "running_var", "num_batches_tracked"))]
    missing = sorted(set(body) - set(loaded))
    if missing:
        raise WeightsError(f"weights file '{path}' leaves {len(missing)} of the backbone's {len(body)} tensors "
                           f"unset (e.g. {', '.join(missing[:3])}; {detail})")
