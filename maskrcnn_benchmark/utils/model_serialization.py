"""Loading a state dict into a model the way maskrcnn-benchmark does, plus this package's old key names.

``load_state_dict(model, loaded)`` tolerates a ``module.`` prefix (a checkpoint of a DataParallel /
DistributedDataParallel model, or a wrapped model loading a plain checkpoint) and matches keys by suffix: each
model key takes the longest loaded key it ends with, so a checkpoint of a sub-module (a backbone, its names
without the model's prefix) loads; names under another prefix than ``module.`` match nothing (weights that
leave a backbone tensor unset are refused by the checkpointer). Unlike the reference, a suffix must start at a
``.`` boundary (``fc6.weight`` never matches ``c6.weight``). Model keys that nothing matches keep their values; they are logged.
"""
import logging
import re
from collections import OrderedDict

logger = logging.getLogger(__name__)

# Module names of this package before it took the reference's names (release 0.1.0) -> the reference's.
_LEGACY_RENAMES = (
    (re.compile(r"(^|\.)fpn\.inner_blocks\.(\d+)\."), lambda m: f"{m.group(1)}fpn.fpn_inner{int(m.group(2)) + 1}."),
    (re.compile(r"(^|\.)fpn\.layer_blocks\.(\d+)\."), lambda m: f"{m.group(1)}fpn.fpn_layer{int(m.group(2)) + 1}."),
    (re.compile(r"(^|\.)roi_heads\.box_feature_extractor\."), lambda m: f"{m.group(1)}roi_heads.box.feature_extractor."),
    (re.compile(r"(^|\.)roi_heads\.box_predictor\."), lambda m: f"{m.group(1)}roi_heads.box.predictor."),
    (re.compile(r"(^|\.)roi_heads\.mask_feature_extractor\.blocks\.(\d+)\."),
     lambda m: f"{m.group(1)}roi_heads.mask.feature_extractor.mask_fcn{int(m.group(2)) + 1}."),
    (re.compile(r"(^|\.)roi_heads\.mask_predictor\."), lambda m: f"{m.group(1)}roi_heads.mask.predictor."),
)


def rename_legacy_keys(state_dict):
    """``(state_dict with the reference's names, number of renamed keys)`` for a checkpoint saved by release
    0.1.0 of this package (``inner_blocks.0`` -> ``fpn_inner1``, ``roi_heads.box_predictor`` ->
    ``roi_heads.box.predictor``, ``mask_feature_extractor.blocks.0`` -> ``mask_fcn1``, ...)."""
    out, renamed = OrderedDict(), 0
    for key, value in state_dict.items():
        new = key
        for pattern, repl in _LEGACY_RENAMES:
            new = pattern.sub(repl, new)
        renamed += new != key
        out[new] = value
    return out, renamed


def strip_prefix_if_present(state_dict, prefix):
    keys = list(state_dict)
    if not keys or not all(k.startswith(prefix) for k in keys):
        return state_dict
    return OrderedDict((k[len(prefix):], v) for k, v in state_dict.items())


def align_and_update_state_dicts(model_state_dict, loaded_state_dict):
    """Copy into ``model_state_dict`` (in place) the loaded tensor whose key is the longest dot-suffix of each
    model key. Returns ``(matched model keys, unmatched model keys, unused loaded keys)``."""
    matched, unmatched, used = [], [], set()
    for key in model_state_dict:
        parts = key.split(".")
        source = next((s for s in (".".join(parts[i:]) for i in range(len(parts))) if s in loaded_state_dict),
                      None)
        if source is None:
            unmatched.append(key)
            continue
        model_state_dict[key] = loaded_state_dict[source]
        matched.append(key)
        used.add(source)
    return matched, unmatched, [k for k in loaded_state_dict if k not in used]


def load_state_dict(model, loaded_state_dict, log=None):
    """The reference's ``load_state_dict(model, loaded_state_dict)``: strip ``module.``, rename keys of this
    package's previous release (with a logged note), match by suffix, load strictly. Returns the lists of
    ``(matched, unmatched model keys, unused checkpoint keys)``."""
    log = log or logger
    loaded = strip_prefix_if_present(OrderedDict(loaded_state_dict), "module.")
    loaded, renamed = rename_legacy_keys(loaded)
    if renamed:
        log.warning("checkpoint uses the module names of maskrcnn_benchmark 0.1.0: %d keys renamed to the "
                    "reference's names (fpn_inner*, roi_heads.box.*, roi_heads.mask.*)", renamed)
    model_state = model.state_dict()
    shapes = {k: tuple(v.shape) for k, v in model_state.items()}
    matched, unmatched, unused = align_and_update_state_dicts(model_state, loaded)
    for key in matched:
        if tuple(model_state[key].shape) != shapes[key]:
            raise ValueError(f"checkpoint tensor '{key}' has shape {tuple(model_state[key].shape)}, the model "
                             f"expects {shapes[key]}")
    model.load_state_dict(model_state)
    # Cell anchors are buffers computed from the config; checkpoints of release 0.1.0 do not carry them.
    unmatched = [k for k in unmatched if ".cell_anchors." not in k]
    if unmatched:
        log.warning("checkpoint misses %d model tensors (they keep their values): %s", len(unmatched),
                    ", ".join(unmatched[:8]) + (" ..." if len(unmatched) > 8 else ""))
    if unused:
        log.info("checkpoint has %d tensors the model does not use: %s", len(unused),
                 ", ".join(unused[:8]) + (" ..." if len(unused) > 8 else ""))
    return matched, unmatched, unused
