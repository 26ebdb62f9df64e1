"""Merging YAML files and ``KEY VALUE`` overrides into a config, with helpful errors.

yacs alone reports an unknown key as ``KeyError: 'Non-existent config key: X'``. Users of the NVIDIA package pass
long ``EXTRA_CONFIG`` strings, so we check every key first and name the closest existing keys.
"""
import difflib
from ast import literal_eval

import yaml
from yacs.config import CfgNode

from .defaults import _C


class ConfigError(ValueError):
    """A config file, key or value that cannot be used. The message names it."""


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
    if isinstance(node, CfgNode) and parts[-1] in node and not isinstance(node[parts[-1]], CfgNode):
        return
    close = difflib.get_close_matches(full_key, list(_all_keys(cfg)), n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ConfigError(f"unknown config key '{full_key}' in {source}{hint}")


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
    if isinstance(value, str) and not isinstance(original, str):
        try:
            value = literal_eval(value)
        except (ValueError, SyntaxError):
            pass
    if isinstance(original, (tuple, list)) and isinstance(value, (tuple, list)):
        return type(original)(value)
    if isinstance(original, (tuple, list)) and isinstance(value, (int, float)) and not isinstance(value, bool):
        return type(original)((value,))
    if isinstance(original, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if original is not None and value is not None and type(original) is not type(value):
        raise ConfigError(
            f"config key '{full_key}' in {source} expects {type(original).__name__}, got {value!r}"
        )
    return value


def _set(cfg, full_key, value):
    node = cfg
    parts = full_key.split(".")
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value


def merge_cfg_from_list(cfg, opts, source="command line"):
    """Merge ``[KEY, VALUE, KEY, VALUE, ...]`` (values as strings or Python objects)."""
    opts = list(opts)
    if len(opts) % 2:
        raise ConfigError(f"{source}: overrides must be KEY VALUE pairs, '{opts[-1]}' has no value")
    for full_key, value in zip(opts[0::2], opts[1::2]):
        _check_key(cfg, full_key, source)
        _set(cfg, full_key, _coerce(cfg, full_key, value, source))
    return cfg


def merge_cfg_from_file(cfg, path):
    """Merge a YAML file. Raises ConfigError naming the file for unreadable YAML or unknown keys."""
    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    except OSError as e:
        raise ConfigError(f"cannot read config file '{path}': {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file '{path}' is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file '{path}' must hold a mapping of keys")
    for full_key, value in _flatten(data):
        _check_key(cfg, full_key, f"'{path}'")
        _set(cfg, full_key, _coerce(cfg, full_key, value, f"'{path}'"))
    return cfg


def load_config(config_file="", opts=(), freeze=False):
    """Defaults <- YAML file <- ``KEY VALUE`` overrides: what every entry point does."""
    cfg = get_cfg()
    if config_file:
        merge_cfg_from_file(cfg, config_file)
    merge_cfg_from_list(cfg, opts)
    if freeze:
        cfg.freeze()
    return cfg
