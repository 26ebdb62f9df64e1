"""Configuration: ``cfg`` is the default tree; use :func:`get_cfg` for a fresh copy."""
from .config_utils import (ConfigError, check_values, get_cfg, given_keys, ignored_settings,  # noqa: F401
                           load_config, merge_cfg_from_file, merge_cfg_from_list)
from .defaults import _C as cfg  # noqa: F401
