"""``setup_environment()``: the reference's hook for site-specific setup, run before the program's work.

If ``TORCH_DETECTRON_ENV_MODULE`` names a Python file, its ``setup_environment()`` is called; otherwise nothing
happens. Entry points call it before their run, inside their error handling (NVIDIA's ``tools/train_mlperf.py``
imports it as its very first line).
"""
import os

from .errors import ConfigError
from .imports import import_file


def setup_custom_environment(custom_module_path):
    """Import the file and call its ``setup_environment()``; a file that cannot be imported, or defines no such
    function, is a :class:`~maskrcnn_benchmark.utils.errors.ConfigError` naming it (one line, exit 1)."""
    try:
        module = import_file("maskrcnn_benchmark.utils.env.custom_module", custom_module_path)
    except FileNotFoundError:
        raise ConfigError(f"TORCH_DETECTRON_ENV_MODULE '{custom_module_path}' does not exist") from None
    except (OSError, SyntaxError, ImportError) as e:
        raise ConfigError(f"TORCH_DETECTRON_ENV_MODULE '{custom_module_path}' cannot be imported: "
                          f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    if not callable(getattr(module, "setup_environment", None)):
        raise ConfigError(f"custom environment module '{custom_module_path}' (TORCH_DETECTRON_ENV_MODULE) defines "
                          "no setup_environment() function")
    module.setup_environment()


def setup_environment():
    path = os.environ.get("TORCH_DETECTRON_ENV_MODULE")
    if path:
        setup_custom_environment(path)
