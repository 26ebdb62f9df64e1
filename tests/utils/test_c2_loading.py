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


@pytest.fixture(scope="module")
def r50_model():
    """One R-50-FPN model for the loading tests (each loads its own blobs into it and compares with them)."""
    return build_detection_model(r50_cfg())


def test_name_mapping_examples():
    assert c2_name_to_ours("res2_0_branch2a_w") == "backbone.body.layer1.0.conv1.weight"
    assert c2_name_to_ours("res2_0_branch1_bn_b") == "backbone.body.layer1.0.downsample.1.bias"
    assert c2_name_to_ours("res5_2_branch2c_bn_b") == "backbone.body.layer4.2.bn3.bias"
    assert c2_name_to_ours("res_conv1_bn_s") == "backbone.body.stem.bn1.weight"
    assert c2_name_to_ours("fc1000_w") is None
    # the reference's renaming rules (maskrcnn-benchmark c2_model_loading._rename_basic_resnet_weights), written
    # out for the blobs whose targets share a shape with others (a swap would load the synthetic file below fine)
    assert c2_name_to_ours("conv1_w") == "backbone.body.stem.conv1.weight"
    assert c2_name_to_ours("res2_1_branch2a_bn_s") == "backbone.body.layer1.1.bn1.weight"
    assert c2_name_to_ours("res3_0_branch2b_bn_b") == "backbone.body.layer2.0.bn2.bias"
    assert c2_name_to_ours("res3_3_branch2b_w") == "backbone.body.layer2.3.conv2.weight"
    assert c2_name_to_ours("res4_0_branch1_w") == "backbone.body.layer3.0.downsample.0.weight"
    assert c2_name_to_ours("res4_5_branch2c_bn_s") == "backbone.body.layer3.5.bn3.weight"
    assert c2_name_to_ours("res4_5_branch2c_w") == "backbone.body.layer3.5.conv3.weight"


def _reference_rename(blob):
    """maskrcnn-benchmark's way to a torch name (c2_model_loading: _rename_basic_resnet_weights, a chain of string
    replacements, then suffix matching in align_and_update_state_dicts), written out independently of our
    regex-based c2_name_to_ours."""
    k = blob.replace("_", ".").replace(".w", ".weight").replace(".bn", "_bn").replace(".b", ".bias")
    k = k.replace("_bn.s", "_bn.scale").replace(".biasranch", ".branch").replace("res.conv1_", "conv1_")
    k = k.replace("_bn.scale", "_bn.weight").replace("conv1_bn.", "bn1.")
    for stage in (2, 3, 4, 5):
        k = k.replace(f"res{stage}.", f"layer{stage - 1}.")
    for c2, ours in (("branch2a.", "conv1."), ("branch2a_bn.", "bn1."), ("branch2b.", "conv2."),
                     ("branch2b_bn.", "bn2."), ("branch2c.", "conv3."), ("branch2c_bn.", "bn3."),
                     ("branch1.", "downsample.0."), ("branch1_bn.", "downsample.1.")):
        k = k.replace("." + c2, "." + ours)
    return k


def test_every_r50_blob_goes_where_the_references_renaming_puts_it(r50_model):
    """The mapping of all 159 body blobs of R-50, judged by the reference's rules (the loading tests below take the
    targets from c2_name_to_ours itself, so a swap of two same-shape tensors would load there unnoticed): each
    model key takes the longest renamed blob name it ends with, as the reference's suffix matching does."""
    keys = list(r50_model.state_dict())
    blobs = synthetic_r50_blobs(r50_model)
    renamed = {_reference_rename(b): b for b in blobs}
    expected = {}
    for key in keys:
        ends = [r for r in renamed if key == r or key.endswith("." + r)]
        if ends:
            expected[renamed[max(ends, key=len)]] = key
    assert len(blobs) == 161 and sorted(set(blobs) - set(expected)) == ["fc1000_b", "fc1000_w"]
    assert {b: c2_name_to_ours(b) for b in expected} == expected


def test_synthetic_r50_pkl_maps_completely(tmp_path, r50_model):
    model = r50_model
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
    # the ImageNet backbone is a training start, not a detector to evaluate (test_net scored its random heads)
    with pytest.raises(WeightsError) as e:
        ckpt.load_weights(str(path), complete=True)
    assert "R-50.pkl" in str(e.value) and "of the model's tensors unset" in str(e.value)
    assert "backbone.body" not in str(e.value).split("(e.g.")[1]  # the body was set: only the rest is named


def python2_pickle(blobs):
    """``blobs`` (name -> float32 array) as Python 2's cPickle (protocol 2) wrote Detectron's files: a flat dict,
    names and array bytes as Python-2 ``str`` (SHORT_BINSTRING / BINSTRING), arrays through
    ``numpy.core.multiarray._reconstruct`` with the state ``(1, shape, dtype('<f4'), False, data)``."""
    import struct

    def string(b):
        return (b"U" + bytes([len(b)]) + b) if len(b) < 256 else (b"T" + struct.pack("<i", len(b)) + b)

    def small_int(n):
        return b"K" + bytes([n]) if n < 256 else b"J" + struct.pack("<i", n)

    out = [b"\x80\x02}(" ]  # PROTO 2, EMPTY_DICT, MARK
    for name, array in blobs.items():
        array = np.ascontiguousarray(array, dtype="<f4")
        out.append(string(name.encode()))
        out.append(b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n" + small_int(0) + b"\x85"
                   + string(b"b") + b"\x87R")  # _reconstruct(ndarray, (0,), 'b')
        shape = b"(" + b"".join(small_int(d) for d in array.shape) + b"t"
        dtype = (b"cnumpy\ndtype\n" + string(b"f4") + small_int(0) + small_int(1) + b"\x87R"
                 + b"(" + small_int(3) + string(b"<") + b"NNN" + b"J\xff\xff\xff\xff" * 2 + small_int(0) + b"tb")
        out.append(b"(" + small_int(1) + shape + dtype + b"\x89" + string(array.tobytes()) + b"tb")
    out.append(b"u.")  # SETITEMS, STOP
    return b"".join(out)


def test_a_python2_detectron_pickle_loads_every_backbone_tensor(tmp_path, r50_model):
    """What the real R-50.pkl is (it cannot be fetched here): Python 2's pickle of a flat dict, numpy's old module
    path, Python-2 strings decoded as latin1, plus blobs the model does not use (Caffe2's conv biases, the
    classifier, momentum). Every mapped tensor equals its blob, the stem's and the shortcuts' included."""
    model = r50_model
    blobs = synthetic_r50_blobs(model)
    blobs["conv1_w"] = np.random.rand(*blobs["conv1_w"].shape).astype(np.float32)
    blobs["conv1_b"] = np.zeros(64, np.float32)
    blobs["res2_0_branch2a_b"] = np.zeros(64, np.float32)
    blobs["res2_0_branch2a_w_momentum"] = np.ones(blobs["res2_0_branch2a_w"].shape, np.float32)
    path = tmp_path / "R-50.pkl"
    path.write_bytes(python2_pickle(blobs))
    from maskrcnn_benchmark.utils.c2_model_loading import load_c2_weights

    loaded, unmatched, missing = load_c2_weights(model, str(path))
    assert sorted(unmatched) == ["conv1_b", "fc1000_b", "fc1000_w", "res2_0_branch2a_b"] and missing == []
    state = model.state_dict()
    for name in loaded:
        np.testing.assert_array_equal(state[c2_name_to_ours(name)].numpy(), blobs[name], err_msg=name)
    assert len(loaded) == 1 + 2 + sum(3 * 3 * c + 3 for c in BLOCKS.values())


def test_a_pickle_that_leaves_the_backbone_unset_is_refused(tmp_path, r50_model):
    """Detectron's multi-GPU names (gpu_0/...), another architecture's or depth's file: none or part of the
    backbone would load and the frozen stages would train from random weights; refused with one line."""
    model = r50_model
    names = synthetic_r50_blobs(model)
    blobs = {f"gpu_0/{k}": np.zeros(1, np.float32) for k in names}
    path = tmp_path / "renamed.pkl"
    path.write_bytes(python2_pickle(blobs))
    with pytest.raises(WeightsError, match=r"renamed\.pkl' leaves 159 of the backbone's 159 tensors unset"):
        DetectronCheckpointer(r50_cfg(), model).load_weights(str(path))
    stem_only = {k: names[k] for k in ("conv1_w", "res_conv1_bn_s", "res_conv1_bn_b")}
    path.write_bytes(python2_pickle(stem_only))
    with pytest.raises(WeightsError, match=r"leaves 156 of the backbone's 159 tensors unset \(e\.g\. "
                                           r"backbone\.body\.layer1\.0\.bn1\.bias"):
        DetectronCheckpointer(r50_cfg(), model).load_weights(str(path))


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
