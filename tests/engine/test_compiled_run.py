"""A compiled training run (COMPILE True): recompiles stay bounded over 100 iterations of batches of every size."""
import logging

import pytest
import torch

from helpers import REPO
from maskrcnn_benchmark.config import load_config
from maskrcnn_benchmark.engine.run import MLPerfRun, RunOptions
from maskrcnn_benchmark.synthetic import make_synthetic_coco

NEVER = ["MLPERF.MIN_BBOX_MAP", 1.0, "MLPERF.MIN_SEGM_MAP", 1.0]


@pytest.mark.slow
def test_recompiles_stay_bounded_over_100_iterations(tmp_path, capsys):
    """Landscape and portrait images of three sizes, multi-scale training, flips, 1 to 3 objects per image: the
    loader pads each batch to one of the two fixed sizes and 96 ground-truth slots, so dynamo compiles the
    training forward once per size and never again (the eager backend: the guards and recompiles are dynamo's,
    whatever generates the code)."""
    from torch._dynamo.utils import counters

    data = tmp_path / "data"
    make_synthetic_coco(str(data), num_train=40, num_val=4, image_size=[(128, 96), (96, 128), (112, 80)], seed=2)
    cfg = load_config(f"{REPO}/configs/e2e_mask_rcnn_synthetic_cpu.yaml", [
        "DATASETS.DATA_DIR", str(data), "OUTPUT_DIR", str(tmp_path / "out"), "DATALOADER.NUM_WORKERS", 0,
        "INPUT.MIN_SIZE_TRAIN", (64, 80, 96), "INPUT.MAX_SIZE_TRAIN", 128, "INPUT.HORIZONTAL_FLIP_PROB_TRAIN", 0.5,
        "SOLVER.MAX_ITER", 100, "SOLVER.IMS_PER_BATCH", 2, "PER_EPOCH_EVAL", False, "COMPILE", True,
        "COMPILE_BACKEND", "eager", *NEVER], freeze=True)
    torch._dynamo.reset()
    counters.clear()
    outcome = MLPerfRun(cfg, RunOptions(seed=1, sync_eval=True)).run()
    stats, recompiles = dict(counters["stats"]), dict(counters["recompiles"])
    print(f"dynamo counters after 100 iterations: stats {stats}, recompiles {recompiles}")
    logging.getLogger().handlers.clear()
    torch._dynamo.reset()
    # the last batch of an aspect-ratio group in an epoch may be a single image: it runs eagerly
    assert 150 < outcome.images < 200
    # one graph per fixed size (96x128 and 128x96), compiled before run_start; none in the 100 iterations
    assert stats["unique_graphs"] == 2, (stats, recompiles)
