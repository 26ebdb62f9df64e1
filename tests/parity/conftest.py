import os

import pytest
import torch

from helpers import REPO, require_shared

GOLDEN_DIR = os.path.join(os.path.dirname(REPO), "shared", "golden")


@pytest.fixture(scope="session")
def golden():
    """Loads ``../shared/golden/<name>.pt`` (outputs of the original maskrcnn-benchmark; see its README)."""
    require_shared(GOLDEN_DIR, "reference golden outputs")
    cache = {}

    def load(name):
        if name not in cache:
            cache[name] = torch.load(os.path.join(GOLDEN_DIR, f"{name}.pt"), weights_only=True)
        return cache[name]

    return load


@pytest.fixture(scope="session")
def device():
    """``MASKRCNN_TEST_DEVICE=cuda`` runs the parity tests with the tensors on the GPU (fp32, TF32 off)."""
    name = os.environ.get("MASKRCNN_TEST_DEVICE", "cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            pytest.skip("MASKRCNN_TEST_DEVICE=cuda but no GPU is visible")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    return torch.device(name)


@pytest.fixture(params=["eager", pytest.param("compiled", marks=pytest.mark.slow)])
def mode(request):
    """How the code under test runs: ``mode(fn)`` is ``fn`` itself (eager), or ``fn`` under ``torch.compile``
    with inductor and static shapes, as a compiled training step runs it (marked slow: inductor starts the C++
    compiler). The assertions are the same in both modes."""
    def eager(fn):
        return fn

    def compiled(fn):
        return torch.compile(fn, dynamic=False)

    eager.compiled, compiled.compiled = False, True  # what a test that only a compiled step runs asks
    if request.param == "eager":
        yield eager
        return
    torch._dynamo.reset()
    yield compiled
    torch._dynamo.reset()
