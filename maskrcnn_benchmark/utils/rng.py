"""The random-number state of a process (python, numpy, torch CPU and CUDA), to save with a checkpoint and
restore on ``--resume`` so a resumed run draws what the uninterrupted one drew. Stored as tensors and plain
Python values only, so checkpoints stay loadable with ``torch.load(weights_only=True)``. And the seeds derived
from a run's seed (:func:`derived_seed`)."""
import hashlib
import random

import numpy as np
import torch


# the first key of a derived seed that is not a training sample's (whose keys are four): what the seed is for
SHUFFLE, PROCESS, LOADER = 1, 2, 3


def derived_seed(*keys):
    """A 63-bit seed mixed from integer ``keys`` (BLAKE2b of their decimal digits: the same on every machine and
    interpreter, for any integers). Nearby keys give unrelated seeds, where ``seed + epoch`` gave the run with seed
    s + 1 in epoch e the order of the run with seed s in epoch e + 1 (tests/data/test_samplers.py)."""
    text = ",".join(str(int(k)) for k in keys).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") & 0x7FFFFFFFFFFFFFFF


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
