"""The COCO scoring process starts without torch: ``spawn`` runs the trainer's entry point (tools/train_mlperf.py,
as ``__mp_main__``) and imports the module of its target (evaluation/background.py, with its packages) and of
the scorer it unpickles (evaluation/scoring.py). Read from the source with ``ast`` (what runs at import: the
module level, class bodies and top-level ``if``/``try`` blocks; not function bodies), following the project's own
modules: none of them imports torch or torchvision at import time. (With torch, each scoring process took about
3 s to start: the last epoch's scores of every run came that much later.)"""
from import_walk import closure

SCORER_ENTRY = ["tools/train_mlperf.py", "maskrcnn_benchmark.evaluation.background",
                "maskrcnn_benchmark.evaluation.scoring"]
HEAVY = ("torch", "torchvision")


def test_the_scoring_process_imports_no_torch():
    seen, external = closure(SCORER_ENTRY)
    assert "maskrcnn_benchmark.evaluation.scoring" in seen and "maskrcnn_benchmark.cli.train_mlperf" in seen
    assert "numpy" in external  # the walk reaches third-party imports
    assert sorted(n for n in external if n.split(".")[0] in HEAVY) == []


def test_the_walk_finds_torch_where_a_module_imports_it():
    """The oracle of the check above: the evaluator (the trainer's side) does import torch."""
    _, external = closure(["maskrcnn_benchmark.evaluation.evaluator"])
    assert "torch" in external
