"""What a program imports when it starts, read from the source with ``ast`` (nothing is imported): the module
level, class bodies and top-level ``if``/``try``/``with`` blocks, not function bodies, following this checkout's own
modules and their packages' ``__init__``; the names it reaches outside the checkout are its third-party imports."""
import ast
import os
import runpy

from helpers import REPO

_resolve = runpy.run_path(f"{REPO}/bench/import_graph.py", run_name="import_graph")["_resolve"]  # relative imports


def _path(module):
    base = os.path.join(REPO, *module.split("."))
    for candidate in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(candidate):
            return candidate
    return None


def _import_time_nodes(body):
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.ClassDef):
            yield from _import_time_nodes(node.body)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for block in (node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])):
                yield from _import_time_nodes(block)
            for handler in getattr(node, "handlers", []):
                yield from _import_time_nodes(handler.body)


def _imported(module, path):
    """Absolute names a module imports when it is imported."""
    is_package = path.endswith("__init__.py")
    with open(path) as f:
        tree = ast.parse(f.read())
    for node in _import_time_nodes(tree.body):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
            continue
        target = _resolve(module, is_package, node)
        yield target
        yield from (f"{target}.{a.name}" for a in node.names if _path(f"{target}.{a.name}"))


def closure(entries):
    """``(modules reached, third-party names)`` from ``entries`` (dotted modules of this checkout, or script paths
    relative to it), following what runs at import time."""
    seen, todo, external = set(), list(entries), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = os.path.join(REPO, name) if name.endswith(".py") else _path(name)
        if path is None:
            external.add(name)
            continue
        module = "__main__" if name.endswith(".py") else name
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # its packages run first
        todo += list(_imported(module, path))
    return seen, external
