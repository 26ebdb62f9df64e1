"""``setup_environment()``: the reference's hook for site-specific setup, run before anything else.

If ``TORCH_DETECTRON_ENV_MODULE`` names a Python file, its ``setup_environment()`` is called; otherwise nothing
happens. Entry points call it first (NVIDIA's ``tools/train_mlperf.py`` imports it as its very first line).
"""
import os

from .imports import import_file


def setup_custom_environment(custom_module_path):
    module = import_file("maskrcnn_benchmark.utils.env.custom_module", custom_module_path)
    if not callable(getattr(module, "setup_environment", None)):
        raise ImportError(f"custom environment module '{custom_module_path}' (TORCH_DETECTRON_ENV_MODULE) defines "
                          "no setup_environment() function")
    module.setup_environment()


def setup_environment():
    path = os.environ.get("TORCH_DETECTRON_ENV_MODULE")
    if path:
        setup_custom_environment(path)
