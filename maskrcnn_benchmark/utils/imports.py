"""``import_file``: load a Python source file as a module (the reference's ``utils/imports.py``),
``load_catalog``: the paths catalog that ``cfg.PATHS_CATALOG`` names, ``resolve_weights``: the file behind a
``catalog://`` weights name, and ``lazy_attributes``: a package's names imported on first use. No torch:
tools/preflight.py uses them."""
import importlib
import importlib.util
import os
import sys

from .errors import ConfigError, WeightsError

_CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "config")


def import_file(module_name, file_path, make_importable=False):
    spec = importlib.util.spec_from_file_location(module_name, file_path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import '{file_path}' as a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if make_importable:
        sys.modules[module_name] = module
    return module


def load_catalog(path, needs="DatasetCatalog"):
    """The catalog module at ``cfg.PATHS_CATALOG`` (a file path, as NVIDIA's configs give it; a bare file name is
    also looked up among the package's own catalogs in ``maskrcnn_benchmark/config``), which must define the class
    ``needs`` (``DatasetCatalog`` for the datasets, ``ModelCatalog`` for ``catalog://`` weights)."""
    if not os.path.isabs(path) and not os.path.exists(path):
        candidate = os.path.join(_CONFIG_DIR, os.path.basename(path))
        if os.path.exists(candidate):
            path = candidate
    if not os.path.exists(path):
        raise FileNotFoundError(f"PATHS_CATALOG file '{path}' does not exist")
    try:
        module = import_file("maskrcnn_benchmark.config._paths_catalog_" + os.path.splitext(os.path.basename(path))[0],
                             path)
    except Exception as e:  # noqa: BLE001 - the user's file: a syntax error, a failing import, ...
        where = f" (line {e.lineno})" if isinstance(e, SyntaxError) and e.lineno else ""
        raise ConfigError(f"PATHS_CATALOG file '{path}' cannot be loaded{where}: {type(e).__name__}: "
                          f"{e.msg if isinstance(e, SyntaxError) else e}") from None
    if not hasattr(module, needs):
        raise ConfigError(f"PATHS_CATALOG file '{path}' defines no {needs} (see maskrcnn_benchmark/config/"
                          "paths_catalog.py)")
    return module


def catalog_get(catalog, name, data_dir):
    """``catalog.get(name, data_dir)``, or ``catalog.get(name)`` where the catalog takes the name alone, as
    maskrcnn-benchmark's (and NVIDIA's) catalogs do: their data root is their own ``DATA_DIR``."""
    import inspect

    try:
        inspect.signature(catalog.get).bind(name, data_dir)
    except TypeError:
        return catalog.get(name)
    except ValueError:  # no signature to read (a builtin): as ours
        pass
    return catalog.get(name, data_dir)


def resolve_weights(cfg, path):
    """The file behind ``MODEL.WEIGHT``: a path as given, or a ``catalog://`` name resolved by the config's paths
    catalog (under ``DATASETS.DATA_DIR``)."""
    if path.startswith("catalog://"):
        catalog = load_catalog(cfg.PATHS_CATALOG, needs="ModelCatalog")
        try:
            path = catalog_get(catalog.ModelCatalog, path[len("catalog://"):], cfg.DATASETS.DATA_DIR)
        except KeyError as e:
            raise WeightsError(f"MODEL.WEIGHT '{path}': {e.args[0] if e.args else e}") from None
        except Exception as e:  # noqa: BLE001 - a site's catalog (maskrcnn-benchmark's: RuntimeError)
            raise WeightsError(f"MODEL.WEIGHT '{path}': the paths catalog cannot give it: {type(e).__name__}: "
                               f"{str(e).splitlines()[0] if str(e) else ''}") from None
    return path


def lazy_attributes(package, module_of):
    """A package's module-level ``__getattr__`` (PEP 562) that imports each name of ``module_of`` (``{name:
    submodule}``) from its submodule on first use and keeps it in the package's namespace: importing the package
    (or a light submodule of it) does not load the heavy ones."""
    def __getattr__(name):
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
