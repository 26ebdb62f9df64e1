"""``import_file``: load a Python source file as a module (the reference's ``utils/imports.py``)."""
import importlib.util
import sys


def import_file(module_name, file_path, make_importable=False):
    spec = importlib.util.spec_from_file_location(module_name, file_path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import '{file_path}' as a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if make_importable:
        sys.modules[module_name] = module
    return module
