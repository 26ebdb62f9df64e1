"""The random-number state of a process (python, numpy, torch CPU and CUDA), to save with a checkpoint and
restore on ``--resume`` so a resumed run draws what the uninterrupted one drew. Stored as tensors and plain
Python values only, so checkpoints stay loadable with ``torch.load(weights_only=True)``. And the seeds derived
from a run's seed (:func:`derived_seed`)."""
import random

import numpy as np
import torch


# the first key of a derived seed that is not a training sample's (whose keys are four): what the seed is for
SHUFFLE, PROCESS = 1, 2


def derived_seed(*keys):
    """A 63-bit seed mixed from integer ``keys`` (Python's tuple hash, the same in every process: integers are not
    salted). Nearby keys give unrelated seeds, where ``seed + epoch`` gave the run with seed s + 1 in epoch e the
    order of the run with seed s in epoch e + 1 (tests/data/test_samplers.py)."""
    return hash(tuple(int(k) for k in keys)) & 0x7FFFFFFFFFFFFFFF


def get_rng_state():
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"python": [version, list(internal), gauss],
             "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state):
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
