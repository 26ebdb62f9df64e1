"""Merging YAML files and ``KEY VALUE`` overrides into a config, with helpful errors.

yacs alone reports an unknown key as ``KeyError: 'Non-existent config key: X'``. Users of the NVIDIA package pass
long ``EXTRA_CONFIG`` strings, so we check every key first and name the closest existing keys.
"""
import difflib
import os
import re
import math
from ast import literal_eval

import yaml
from yacs.config import CfgNode

from ..utils.errors import ConfigError
from .defaults import _C

FPN_LEVELS = 5  # P2-P6: the levels of every backbone this package builds (modeling/backbone)

__all__ = ["ConfigError", "get_cfg", "given_keys", "load_config", "merge_cfg_from_file", "merge_cfg_from_list",
           "check_values", "ignored_settings"]


def given_keys(cfg):
    """The keys that a YAML file or the command line set (whatever their value), as merged into ``cfg``."""
    return frozenset(cfg.__dict__.get("_given_keys", ()))


def _note_given(cfg, keys):
    # kept beside the yacs tree (not a key of it): clone() and freeze() keep it
    object.__setattr__(cfg, "_given_keys", given_keys(cfg) | set(keys))


def get_cfg():
    """A fresh, mutable copy of the defaults."""
    return _C.clone()


def _all_keys(node, prefix=""):
    for key, value in node.items():
        full = prefix + key
        if isinstance(value, CfgNode):
            yield from _all_keys(value, full + ".")
        else:
            yield full


def _check_key(cfg, full_key, source):
    node = cfg
    parts = full_key.split(".")
    for part in parts[:-1]:
        node = node.get(part) if isinstance(node, CfgNode) else None
        if not isinstance(node, CfgNode):
            break
    if isinstance(node, CfgNode) and parts[-1] in node:
        if not isinstance(node[parts[-1]], CfgNode):
            return
        raise ConfigError(f"config key '{full_key}' in {source} is a section of keys, not a value: set its keys "
                          f"({full_key}.{next(iter(node[parts[-1]]))}, ...)")
    keys = list(_all_keys(cfg))
    by_upper = {}
    for key in keys:
        by_upper.setdefault(key.upper(), key)
    # the key in another case (solver.base_lr), a key by its last name (NUM_CLASSES, DATADIR), then the closest
    close = [by_upper[k] for k in difflib.get_close_matches(full_key.upper(), list(by_upper), n=3, cutoff=0.6)]
    if not close:
        last = {}
        for key in keys:
            last.setdefault(key.rsplit(".", 1)[-1], []).append(key)
        name = full_key.upper().rsplit(".", 1)[-1]
        match = difflib.get_close_matches(name, list(last), n=1, cutoff=0.8)
        close = last[match[0]][:3] if match else []
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    if str(full_key).endswith((".yaml", ".yml")):
        hint = f"; a config file is given as --config-file {full_key}"
    elif not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", str(full_key)):
        hint = ("; not a key: a value split at a space? write a tuple without spaces, e.g. (12000,16000), or quote "
                "it")
    raise ConfigError(f"unknown config key '{full_key}' in {source}{hint}")


# keys of facebookresearch/maskrcnn-benchmark that NVIDIA's package renamed: taken under the new name
RENAMED_KEYS = {"MODEL.RESNETS.BACKBONE_OUT_CHANNELS": "MODEL.BACKBONE.OUT_CHANNELS"}


def _flatten(data, prefix=""):
    for key, value in data.items():
        full = prefix + str(key)
        if isinstance(value, dict):
            yield from _flatten(value, full + ".")
        else:
            yield full, value


def _coerce(cfg, full_key, value, source):
    node = cfg
    for part in full_key.split(".")[:-1]:
        node = node[part]
    original = node[full_key.split(".")[-1]]
    if isinstance(value, str):  # as yacs: a Python literal is read as one ("'/results'" is /results)
        try:
            literal = literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            literal = value
        if not isinstance(original, str) or isinstance(literal, str):  # a string key keeps 1e-3 as written
            value = literal
    if isinstance(original, (tuple, list)) and isinstance(value, (int, float)) and not isinstance(value, bool):
        value = (value,)
    if isinstance(original, (tuple, list)) and isinstance(value, (tuple, list)):
        return type(original)(_coerce_items(original, value, full_key, source))
    if isinstance(original, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if value is None and _get(_C, full_key) is None:  # a key that is automatic by default: back to automatic
        return None
    if original is not None and value is None:
        raise ConfigError(f"config key '{full_key}' in {source} expects {type(original).__name__}, got no value "
                          "(None)")
    if original is not None and type(original) is not type(value):
        raise ConfigError(
            f"config key '{full_key}' in {source} expects {type(original).__name__}, got {value!r}"
        )
    return value


def _coerce_items(original, value, full_key, source):
    """The items of a list value, checked against the default's when those are all numbers or all strings (an int
    where floats are expected becomes a float; a whole float where ints are, an int)."""
    kinds = {type(x) for x in original}
    if len(kinds) != 1 or not kinds <= {int, float, str}:
        return value  # empty, nested or mixed defaults: nothing to check against
    kind = kinds.pop()
    out = []
    for item in value:
        if kind is float and isinstance(item, int) and not isinstance(item, bool):
            item = float(item)
        elif kind is int and isinstance(item, float) and item.is_integer():
            item = int(item)
        if type(item) is not kind:
            raise ConfigError(f"config key '{full_key}' in {source} expects a list of {kind.__name__}, got "
                              f"{list(value)!r}")
        out.append(item)
    return out


def _set(cfg, full_key, value):
    node = cfg
    parts = full_key.split(".")
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value


def _refuse_frozen(cfg, source):
    if cfg.is_frozen():  # yacs guards attribute assignment only; a merge would change it and skip the checks
        raise ConfigError(f"{source}: the config is frozen (a resolved or checked config); merge into a clone "
                          "(cfg.clone(), then defrost())")


def merge_cfg_from_list(cfg, opts, source="command line"):
    """Merge ``[KEY, VALUE, KEY, VALUE, ...]`` (values as strings or Python objects)."""
    _refuse_frozen(cfg, source)
    opts = list(opts)
    keys = [RENAMED_KEYS.get(k, str(k)) for k in opts[0::2]]  # (a list built in code may hold numbers there)
    # every key that has a value first, in order: a token out of step (a value split at a space, a config file
    # given without --config-file) is named where it stands, not the well-formed value that ends the list
    for full_key in keys[:len(opts) // 2]:
        _check_key(cfg, full_key, source)
    if len(opts) % 2:
        raise ConfigError(f"{source}: overrides must be KEY VALUE pairs, '{opts[-1]}' has no value")
    for full_key, value in zip(keys, opts[1::2]):
        _set(cfg, full_key, _coerce(cfg, full_key, value, source))
    _note_given(cfg, keys)
    return cfg


def _yaml_problem(e):
    """A YAML error on one line, with where it was found (PyYAML puts the position on later lines)."""
    problem = getattr(e, "problem", None)
    mark = getattr(e, "problem_mark", None)
    if not problem:
        return " ".join(str(e).split())
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    context = getattr(e, "context", None)
    return f"{problem}{where}" + (f" ({context})" if context else "")


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml's safe loader, but a key given twice in one mapping is an error (yaml keeps the last: a section
    repeated at the bottom of a file would replace the whole first one)."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise ConfigError(f"key {key!r} appears twice in one mapping (lines {seen[key] + 1} and "
                                  f"{key_node.start_mark.line + 1}): the second would replace the first")
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def merge_cfg_from_file(cfg, path):
    """Merge a YAML file. Raises ConfigError naming the file for unreadable YAML, a key given twice or unknown
    keys."""
    _refuse_frozen(cfg, f"config file '{path}'")
    try:
        with open(path) as f:
            data = yaml.load(f, Loader=_UniqueKeyLoader) or {}
    except ConfigError as e:
        raise ConfigError(f"config file '{path}': {e}") from None
    except OSError as e:
        raise ConfigError(f"cannot read config file '{path}': {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file '{path}' is not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset "
                          f"{e.start}): give a YAML file") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file '{path}' is not valid YAML: {_yaml_problem(e)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file '{path}' must hold a mapping of keys")
    items = [(RENAMED_KEYS.get(k, k), v) for k, v in _flatten(data)]
    for full_key, value in items:
        _check_key(cfg, full_key, f"'{path}'")
        _set(cfg, full_key, _coerce(cfg, full_key, value, f"'{path}'"))
    _note_given(cfg, [k for k, _ in items])
    return cfg


# Keys kept so that upstream configs merge, but with no effect on this package's model (Mask R-CNN with FPN):
# setting one to another value than the default is reported once (``ignored_settings``).
IGNORED_KEYS = (
    "MODEL.RPN_ONLY", "MODEL.RETINANET_ON", "MODEL.KEYPOINT_ON", "MODEL.RETINANET.", "MODEL.ROI_KEYPOINT_HEAD.",
    "MODEL.RPN.USE_FPN", "MODEL.ROI_HEADS.USE_FPN", "MODEL.BACKBONE.USE_GN", "MODEL.ROI_BOX_HEAD.USE_GN",
    "MODEL.ROI_BOX_HEAD.DILATION", "MODEL.ROI_BOX_HEAD.CONV_HEAD_DIM", "MODEL.ROI_BOX_HEAD.NUM_STACKED_CONVS",
    "MODEL.ROI_MASK_HEAD.MLP_HEAD_DIM", "MODEL.ROI_MASK_HEAD.SHARE_BOX_FEATURE_EXTRACTOR",
    "TEST.DETECTIONS_PER_IMG", "TEST.EXPECTED_RESULTS", "TEST.EXPECTED_RESULTS_SIGMA_TOL", "AMP_VERBOSE",
)
# Ignored keys whose upstream value differs from the default in every config this package ships (the
# reference's yamls set SHARE_BOX_FEATURE_EXTRACTOR False and the USE_FPN flags True for FPN models).
_EXPECTED_VALUES = {"MODEL.RPN.USE_FPN": (True, False), "MODEL.ROI_HEADS.USE_FPN": (True, False),
                    "MODEL.ROI_MASK_HEAD.SHARE_BOX_FEATURE_EXTRACTOR": (True, False)}


def _get(cfg, full_key):
    node = cfg
    for part in full_key.split("."):
        node = node[part]
    return node


def ignored_settings(cfg):
    """``KEY=value`` for every ignored key set to something that would matter elsewhere (a sorted list)."""
    out = []
    for key in _all_keys(cfg):
        if not any(key == k or (k.endswith(".") and key.startswith(k)) for k in IGNORED_KEYS):
            continue
        value, default = _get(cfg, key), _get(_C, key)
        if value == default or value in _EXPECTED_VALUES.get(key, ()):
            continue
        out.append(f"{key}={value!r}")
    return sorted(out)


def _require(ok, key, value, what):
    if not ok:
        raise ConfigError(f"config key '{key}' = {value!r}: {what}")


def check_values(cfg):
    """Reject values that cannot work, with one line naming the key (instead of a ZeroDivisionError or a
    silent no-op run later)."""
    def positive_int(key):
        v = _get(cfg, key)
        _require(isinstance(v, int) and not isinstance(v, bool) and v > 0, key, v, "must be a positive integer")

    for key in ("SOLVER.IMS_PER_BATCH", "TEST.IMS_PER_BATCH", "SOLVER.MAX_ITER", "MODEL.RPN.BATCH_SIZE_PER_IMAGE",
                "MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE", "MODEL.RPN.PRE_NMS_TOP_N_TRAIN",
                "MODEL.RPN.POST_NMS_TOP_N_TRAIN", "MODEL.RPN.FPN_POST_NMS_TOP_N_TRAIN",
                "MODEL.RPN.PRE_NMS_TOP_N_TEST", "MODEL.RPN.POST_NMS_TOP_N_TEST",
                "MODEL.RPN.FPN_POST_NMS_TOP_N_TEST", "MODEL.ROI_MASK_HEAD.RESOLUTION", "INPUT.MAX_SIZE_TRAIN",
                "INPUT.MAX_SIZE_TEST", "INPUT.MIN_SIZE_TEST"):
        positive_int(key)
    positive_int("DISTRIBUTED_TIMEOUT")
    for key in ("MODEL.ROI_BOX_HEAD.POOLER_RESOLUTION", "MODEL.ROI_MASK_HEAD.POOLER_RESOLUTION",
                "MODEL.BACKBONE.OUT_CHANNELS"):
        positive_int(key)
    v = cfg.INPUT.PIXEL_MEAN
    _require(len(v) == 3, "INPUT.PIXEL_MEAN", v, "must hold 3 numbers (B, G, R)")
    v = cfg.INPUT.PIXEL_STD
    _require(len(v) == 3 and all(x > 0 for x in v), "INPUT.PIXEL_STD", v, "must hold 3 positive numbers (B, G, R)")
    v = cfg.MODEL.ROI_HEADS.BBOX_REG_WEIGHTS
    _require(len(v) == 4 and all(x > 0 for x in v), "MODEL.ROI_HEADS.BBOX_REG_WEIGHTS", v,
             "must hold 4 positive numbers (x, y, w, h)")
    # the FPN's levels: anchors on P2-P6 (one stride and one size each), ROIs pooled from P2-P5
    rpn = cfg.MODEL.RPN
    _require(len(rpn.ANCHOR_STRIDE) == FPN_LEVELS and all(x > 0 for x in rpn.ANCHOR_STRIDE),
             "MODEL.RPN.ANCHOR_STRIDE", tuple(rpn.ANCHOR_STRIDE),
             f"must hold one stride per FPN level ({FPN_LEVELS}: P2-P6), positive; R-50-FPN: (4, 8, 16, 32, 64)")
    _require(len(rpn.ANCHOR_SIZES) == FPN_LEVELS and all(x > 0 for x in rpn.ANCHOR_SIZES),
             "MODEL.RPN.ANCHOR_SIZES", tuple(rpn.ANCHOR_SIZES),
             f"must hold one size per FPN level ({FPN_LEVELS}: P2-P6), positive; R-50-FPN: (32, 64, 128, 256, 512)")
    _require(len(rpn.ASPECT_RATIOS) > 0 and all(x > 0 for x in rpn.ASPECT_RATIOS), "MODEL.RPN.ASPECT_RATIOS",
             tuple(rpn.ASPECT_RATIOS), "must hold positive ratios")
    box, mask = cfg.MODEL.ROI_BOX_HEAD.POOLER_SCALES, cfg.MODEL.ROI_MASK_HEAD.POOLER_SCALES
    heads = [("MODEL.ROI_BOX_HEAD.POOLER_SCALES", box)]
    if cfg.MODEL.MASK_ON:
        heads.append(("MODEL.ROI_MASK_HEAD.POOLER_SCALES", mask))
    for key, v in heads:
        _require(len(v) > 0 and all(0 < x <= 1 for x in v), key, v, "must hold scales in (0, 1]")
        # the pooler takes the features from P2 on and maps each ROI to a level between its first and last scale
        _require(len(v) <= FPN_LEVELS - 1 and all(abs(x - 0.25 / 2 ** i) < 1e-9 for i, x in enumerate(v)), key,
                 tuple(v), "must be the FPN's P2, P3, ... scales in order: (0.25, 0.125, 0.0625, 0.03125) or a "
                 "prefix of it")
    for key in ("MODEL.RESNETS.NUM_GROUPS", "MODEL.RESNETS.WIDTH_PER_GROUP", "MODEL.RESNETS.STEM_OUT_CHANNELS",
                "MODEL.RESNETS.RES2_OUT_CHANNELS"):
        positive_int(key)
    v = cfg.MODEL.ROI_MASK_HEAD.CONV_LAYERS
    _require(len(v) > 0 and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v),
             "MODEL.ROI_MASK_HEAD.CONV_LAYERS", tuple(v), "must hold the channels of at least one convolution")
    # both heads pool the same feature levels (the FPN's P2-P5)
    _require(not cfg.MODEL.MASK_ON or len(box) == len(mask), "MODEL.ROI_BOX_HEAD.POOLER_SCALES", box,
             "must hold one scale per level of MODEL.ROI_MASK_HEAD.POOLER_SCALES "
             f"({len(mask)} levels: {tuple(mask)})")
    for key in ("DATASETS.TRAIN", "DATASETS.TEST"):  # names of the paths catalog
        v = _get(cfg, key)
        _require(all(isinstance(x, str) and x for x in v), key, v, "must hold dataset names (strings)")
    for key in ("DATALOADER.NUM_WORKERS", "DATALOADER.SIZE_DIVISIBILITY", "SOLVER.WARMUP_ITERS",
                "SOLVER.CHECKPOINT_PERIOD", "MODEL.ROI_HEADS.DETECTIONS_PER_IMG"):
        v = _get(cfg, key)
        _require(isinstance(v, int) and not isinstance(v, bool) and v >= 0, key, v, "must be an integer >= 0")
    v = cfg.MODEL.ROI_BOX_HEAD.NUM_CLASSES
    _require(isinstance(v, int) and v >= 2, "MODEL.ROI_BOX_HEAD.NUM_CLASSES", v,
             "must count the background and at least one class (>= 2)")
    v = cfg.INPUT.MIN_SIZE_TRAIN
    _require(len(v) > 0 and all(isinstance(x, int) and x > 0 for x in v), "INPUT.MIN_SIZE_TRAIN", v,
             "must hold positive integers")
    for key in ("SOLVER.BASE_LR", "SOLVER.GAMMA"):
        v = _get(cfg, key)
        _require(math.isfinite(v) and v > 0, key, v, "must be a finite number > 0")
    for key in ("SOLVER.MOMENTUM", "SOLVER.WEIGHT_DECAY", "SOLVER.WEIGHT_DECAY_BIAS", "SOLVER.WARMUP_FACTOR",
                "SOLVER.CLIP_GRAD_NORM"):
        v = _get(cfg, key)
        _require(math.isfinite(v) and v >= 0, key, v, "must be a finite number >= 0")
    for key in ("MODEL.RPN.POSITIVE_FRACTION", "MODEL.ROI_HEADS.POSITIVE_FRACTION"):
        v = _get(cfg, key)
        _require(0 < v <= 1, key, v, "must be in (0, 1]")
    for key in ("MODEL.RPN.NMS_THRESH", "MODEL.ROI_HEADS.NMS", "MODEL.RPN.FG_IOU_THRESHOLD",
                "MODEL.RPN.BG_IOU_THRESHOLD", "MODEL.ROI_HEADS.FG_IOU_THRESHOLD", "MODEL.ROI_HEADS.BG_IOU_THRESHOLD",
                "MODEL.ROI_HEADS.SCORE_THRESH", "MLPERF.MIN_BBOX_MAP", "MLPERF.MIN_SEGM_MAP"):
        v = _get(cfg, key)
        _require(0 <= v <= 1, key, v, "must be in [0, 1]")
    for head in ("MODEL.RPN", "MODEL.ROI_HEADS"):  # the matcher's negatives lie below its positives
        fg, bg = _get(cfg, f"{head}.FG_IOU_THRESHOLD"), _get(cfg, f"{head}.BG_IOU_THRESHOLD")
        _require(bg <= fg, f"{head}.BG_IOU_THRESHOLD", bg, f"must not exceed {head}.FG_IOU_THRESHOLD ({fg})")
    steps = list(cfg.SOLVER.STEPS)
    _require(steps == sorted(steps) and all(isinstance(x, int) and x >= 0 for x in steps), "SOLVER.STEPS", steps,
             "must be increasing iterations >= 0")
    _require(cfg.SOLVER.WARMUP_METHOD in ("constant", "linear", "mlperf_linear"), "SOLVER.WARMUP_METHOD",
             cfg.SOLVER.WARMUP_METHOD, "must be constant, linear or mlperf_linear")
    _require(cfg.TEST.COCO_BACKEND in ("auto", "faster_coco_eval", "pycocotools"), "TEST.COCO_BACKEND",
             cfg.TEST.COCO_BACKEND, "must be auto, faster_coco_eval or pycocotools")
    _require(cfg.TEST.MASK_ENCODING in ("box", "full"), "TEST.MASK_ENCODING", cfg.TEST.MASK_ENCODING,
             "must be box or full")
    _require(isinstance(cfg.TEST.COCO_WORKERS, int) and cfg.TEST.COCO_WORKERS >= 0, "TEST.COCO_WORKERS",
             cfg.TEST.COCO_WORKERS, "must be an integer >= 0 (0: one per core)")
    _require(cfg.DATALOADER.HYBRID in (None, True, False), "DATALOADER.HYBRID", cfg.DATALOADER.HYBRID,
             "must be True, False or None (None: on for MODEL.DEVICE cuda)")
    _require(cfg.COMPILE in (None, True, False), "COMPILE", cfg.COMPILE,
             "must be True, False or None (None: on for MODEL.DEVICE cuda)")
    _require(cfg.COMPILE_MODE in ("auto", "default", "reduce-overhead", "max-autotune",
                                  "max-autotune-no-cudagraphs"), "COMPILE_MODE", cfg.COMPILE_MODE,
             "must be auto, default, reduce-overhead, max-autotune or max-autotune-no-cudagraphs")
    _require(cfg.COMPILE_BACKEND in ("inductor", "aot_eager", "eager"), "COMPILE_BACKEND", cfg.COMPILE_BACKEND,
             "must be inductor, aot_eager or eager")
    m = cfg.DATALOADER.MAX_ANNOTATIONS_PER_IMAGE
    _require(isinstance(m, int) and m >= 1, "DATALOADER.MAX_ANNOTATIONS_PER_IMAGE", m, "must be an integer >= 1")
    k = cfg.DATALOADER.STATIC_SHAPES_PER_ORIENTATION
    _require(isinstance(k, int) and 1 <= k <= 8, "DATALOADER.STATIC_SHAPES_PER_ORIENTATION", k,
             "must be an integer from 1 to 8")
    slots = cfg.DATALOADER.STATIC_POLYGON_SLOTS
    # >= 2: a compiled step's dynamic dimension of size 1 is specialized by dynamo (one more compile for 2)
    _require(slots is None or (isinstance(slots, (list, tuple)) and len(slots) == 2 and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 2 for v in slots)),
        "DATALOADER.STATIC_POLYGON_SLOTS", slots, "must be None or two integers >= 2 (vertices, parts)")
    _require(cfg.DTYPE in ("float32", "float16", "bfloat16"), "DTYPE", cfg.DTYPE,
             "must be float32, float16 or bfloat16")
    # not cuda:N: each process takes the GPU of its local rank (the reference's rule), and the code that asks
    # "cuda?" compares the name (a cuda:N config trained on the CPU)
    _require(cfg.MODEL.DEVICE in ("cpu", "cuda"), "MODEL.DEVICE", cfg.MODEL.DEVICE,
             "must be cpu or cuda (each process takes the GPU of its local rank; CUDA_VISIBLE_DEVICES picks GPUs)")
    return cfg


# keys that name a file or folder: "~" is the user's home folder there, as in a shell
PATH_KEYS = ("OUTPUT_DIR", "DATASETS.DATA_DIR", "MODEL.WEIGHT", "PATHS_CATALOG")


def load_config(config_file="", opts=(), freeze=False):
    """Defaults <- YAML file <- ``KEY VALUE`` overrides, values checked: what every entry point does."""
    cfg = get_cfg()
    if config_file:
        merge_cfg_from_file(cfg, config_file)
    merge_cfg_from_list(cfg, opts)
    for key in PATH_KEYS:  # a YAML file's "~" reaches no shell
        value = _get(cfg, key)
        if isinstance(value, str) and value.startswith("~"):
            _set(cfg, key, os.path.expanduser(value))
    check_values(cfg)
    if freeze:
        cfg.freeze()
    return cfg
