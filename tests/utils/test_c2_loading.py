import os
import pickle

import numpy as np
import pytest
import torch

from helpers import r50_cfg
from maskrcnn_benchmark.modeling import build_detection_model
from maskrcnn_benchmark.utils.c2_model_loading import WeightsError, c2_name_to_ours, load_c2_pickle
from maskrcnn_benchmark.utils.checkpoint import DetectronCheckpointer, atomic_torch_save

BLOCKS = {2: 3, 3: 4, 4: 6, 5: 3}


def synthetic_r50_blobs(model):
    """Detectron R-50 blob names with shapes taken from our model, plus the unused classifier."""
    state = model.state_dict()
    blobs = {"conv1_w": state["backbone.body.stem.conv1.weight"].numpy()}
    for s in ("s", "b"):
        blobs[f"res_conv1_bn_{s}"] = np.random.rand(64).astype(np.float32)
    for stage, count in BLOCKS.items():
        for b in range(count):
            branches = ["2a", "2b", "2c"] + (["1"] if b == 0 else [])
            for br in branches:
                base = f"res{stage}_{b}_branch{br}"
                ours = c2_name_to_ours(base + "_w")
                blobs[base + "_w"] = np.random.rand(*state[ours].shape).astype(np.float32)
                n = state[ours].shape[0]
                blobs[base + "_bn_s"] = np.random.rand(n).astype(np.float32)
                blobs[base + "_bn_b"] = np.random.rand(n).astype(np.float32)
    blobs["fc1000_w"] = np.zeros((1000, 2048), np.float32)
    blobs["fc1000_b"] = np.zeros(1000, np.float32)
    return blobs


def test_name_mapping_examples():
    assert c2_name_to_ours("res2_0_branch2a_w") == "backbone.body.layer1.0.conv1.weight"
    assert c2_name_to_ours("res2_0_branch1_bn_b") == "backbone.body.layer1.0.downsample.1.bias"
    assert c2_name_to_ours("res5_2_branch2c_bn_b") == "backbone.body.layer4.2.bn3.bias"
    assert c2_name_to_ours("res_conv1_bn_s") == "backbone.body.stem.bn1.weight"
    assert c2_name_to_ours("fc1000_w") is None


def test_synthetic_r50_pkl_maps_completely(tmp_path):
    model = build_detection_model(r50_cfg())
    blobs = synthetic_r50_blobs(model)
    path = tmp_path / "R-50.pkl"
    with open(path, "wb") as f:
        pickle.dump({"blobs": blobs}, f, protocol=2)
    ckpt = DetectronCheckpointer(r50_cfg(), model)
    ckpt.load_weights(str(path))
    from maskrcnn_benchmark.utils.c2_model_loading import load_c2_weights

    loaded, unmatched, missing = load_c2_weights(model, str(path))
    assert unmatched == ["fc1000_b", "fc1000_w"]
    assert missing == []
    assert len(loaded) == len(blobs) - 2 == 1 + 2 + sum(3 * 3 * c + 3 for c in BLOCKS.values())
    np.testing.assert_array_equal(model.state_dict()["backbone.body.layer4.2.bn3.bias"].numpy(),
                                  blobs["res5_2_branch2c_bn_b"])


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned > /tmp/pwned_by_pickle",))


def test_restricted_unpickler_refuses_code(tmp_path):
    path = tmp_path / "evil.pkl"
    with open(path, "wb") as f:
        pickle.dump({"blobs": {"conv1_w": _Evil()}}, f)
    with pytest.raises(WeightsError, match=r"refusing to load .*evil\.pkl.*(posix|os)\.system"):
        load_c2_pickle(str(path))
    assert not os.path.exists("/tmp/pwned_by_pickle")


def test_corrupt_and_missing_weights_give_clear_errors(tmp_path):
    bad = tmp_path / "bad.pkl"
    bad.write_bytes(b"not a pickle")
    with pytest.raises(WeightsError, match="bad.pkl"):
        load_c2_pickle(str(bad))
    with pytest.raises(WeightsError, match="nope.pth"):
        DetectronCheckpointer(r50_cfg(), torch.nn.Linear(1, 1)).load_weights(str(tmp_path / "nope.pth"))


def test_torch_checkpoint_roundtrip_is_weights_only_and_atomic(tmp_path):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ckpt = DetectronCheckpointer(None, model, opt, save_dir=str(tmp_path), save_to_disk=True)
    path = ckpt.save("model_0001", iteration=1)
    assert os.path.basename(path) == "model_0001.pth" and ckpt.get_checkpoint_file() == path
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp")]
    other = torch.nn.Linear(3, 2)
    extra = DetectronCheckpointer(None, other).load_weights(path)
    assert extra == {"iteration": 1}
    torch.testing.assert_close(other.weight, model.weight)
    # a checkpoint carrying arbitrary objects is refused by weights_only loading
    evil = tmp_path / "evil.pth"
    torch.save({"model": {}, "x": _Evil()}, evil)
    with pytest.raises(WeightsError, match="evil.pth"):
        DetectronCheckpointer(None, other).load_weights(str(evil))


def test_atomic_save_keeps_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "ckpt.pth"
    atomic_torch_save({"a": torch.ones(1)}, str(path))

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        atomic_torch_save({"a": Unpicklable()}, str(path))
    assert torch.load(path, weights_only=True)["a"].item() == 1
    assert os.listdir(tmp_path) == ["ckpt.pth"]
