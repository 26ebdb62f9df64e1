"""Configuration: ``cfg`` is the default tree; use :func:`get_cfg` for a fresh copy."""
from .config_utils import (ConfigError, check_values, get_cfg, ignored_settings, load_config,  # noqa: F401
                           merge_cfg_from_file, merge_cfg_from_list)
from .defaults import _C as cfg  # noqa: F401
