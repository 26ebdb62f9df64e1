"""Configuration: ``cfg`` is the default tree; use :func:`get_cfg` for a fresh copy."""
from .config_utils import ConfigError, get_cfg, load_config, merge_cfg_from_file, merge_cfg_from_list  # noqa: F401
from .defaults import _C as cfg  # noqa: F401
