"""The COCO scoring process starts without torch: ``spawn`` runs the trainer's entry point (tools/train_mlperf.py,
as ``__mp_main__``) and imports the module of its target (evaluation/background.py, with its packages) and of
the scorer it unpickles (evaluation/scoring.py). Read from the source with ``ast`` (what runs at import: the
module level, class bodies and top-level ``if``/``try`` blocks; not function bodies), following the project's own
modules: none of them imports torch or torchvision at import time. (With torch, each scoring process took about
3 s to start: the last epoch's scores of every run came that much later.)"""
import ast
import os

from helpers import REPO

SCORER_ENTRY = ["tools/train_mlperf.py", "maskrcnn_benchmark.evaluation.background",
                "maskrcnn_benchmark.evaluation.scoring"]
HEAVY = ("torch", "torchvision")


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
        if node.level:
            parts = module.split(".")
            base = parts[:len(parts) - node.level + (1 if is_package else 0)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module
        yield target
        yield from (f"{target}.{a.name}" for a in node.names if _path(f"{target}.{a.name}"))


def _closure(entries):
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


def test_the_scoring_process_imports_no_torch():
    seen, external = _closure(SCORER_ENTRY)
    assert "maskrcnn_benchmark.evaluation.scoring" in seen and "maskrcnn_benchmark.cli.train_mlperf" in seen
    assert "numpy" in external  # the walk reaches third-party imports
    assert sorted(n for n in external if n.split(".")[0] in HEAVY) == []


def test_the_walk_finds_torch_where_a_module_imports_it():
    """The oracle of the check above: the evaluator (the trainer's side) does import torch."""
    _, external = _closure(["maskrcnn_benchmark.evaluation.evaluator"])
    assert "torch" in external
