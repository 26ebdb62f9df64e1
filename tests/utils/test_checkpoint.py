"""Checkpoint compatibility: the reference's module names, the previous release's names, the reference's
Checkpointer / MetricLogger / model_serialization / env / imports API."""
import collections
import json
import logging
import os
import shutil

import pytest
import torch
from torch import nn

from helpers import R50_YAML, r50_cfg, small_cfg
from maskrcnn_benchmark.modeling import build_detection_model
from maskrcnn_benchmark.utils.c2_model_loading import WeightsError
from maskrcnn_benchmark.utils.checkpoint import Checkpointer, DetectronCheckpointer
from maskrcnn_benchmark.utils.model_serialization import load_state_dict

DATA = os.path.join(os.path.dirname(__file__), "data")

# maskrcnn-benchmark's module names for Mask R-CNN R-50-FPN outside the ResNet body (modeling/backbone/fpn.py
# adds fpn_inner<i>/fpn_layer<i>; rpn/anchor_generator.py keeps cell_anchors in a BufferList; roi_heads.py builds
# CombinedROIHeads with "box" and "mask", each with feature_extractor/predictor; mask_fcn<i> and conv5_mask /
# mask_fcn_logits in roi_mask_feature_extractors.py / roi_mask_predictors.py).
REFERENCE_HEAD_KEYS = (
    [f"backbone.fpn.fpn_{kind}{i}.{p}" for i in range(1, 5) for kind in ("inner", "layer") for p in ("weight", "bias")]
    + [f"rpn.anchor_generator.cell_anchors.{i}" for i in range(5)]
    + [f"rpn.head.{m}.{p}" for m in ("conv", "cls_logits", "bbox_pred") for p in ("weight", "bias")]
    + [f"roi_heads.box.feature_extractor.{m}.{p}" for m in ("fc6", "fc7") for p in ("weight", "bias")]
    + [f"roi_heads.box.predictor.{m}.{p}" for m in ("cls_score", "bbox_pred") for p in ("weight", "bias")]
    + [f"roi_heads.mask.feature_extractor.mask_fcn{i}.{p}" for i in range(1, 5) for p in ("weight", "bias")]
    + [f"roi_heads.mask.predictor.{m}.{p}" for m in ("conv5_mask", "mask_fcn_logits") for p in ("weight", "bias")]
)


def test_state_dict_uses_the_reference_names():
    keys = list(build_detection_model(r50_cfg()).state_dict())
    head = [k for k in keys if not k.startswith("backbone.body.")]
    assert sorted(head) == sorted(REFERENCE_HEAD_KEYS)
    # The body: MSRA layout (stem.conv1/bn1, layer<i>.<b>.conv<j>/bn<j>/downsample.{0,1}), FrozenBatchNorm2d
    # buffers weight/bias/running_mean/running_var, as the reference.
    assert "backbone.body.layer1.0.downsample.1.running_var" in keys
    assert "backbone.body.layer4.2.conv3.weight" in keys and len(keys) - len(head) == 53 * 4 + 53


def test_checkpoint_of_release_0_1_0_loads_with_a_note(caplog):
    """Key names and shapes recorded from release 0.1.0 (commit fe03c93) of this package."""
    with open(os.path.join(DATA, "release_0_1_0_small_model_keys.json")) as f:
        old_keys = json.load(f)["keys"]
    gen = torch.Generator().manual_seed(0)
    old_state = {k: torch.randn(shape, generator=gen) for k, shape in old_keys}
    model = build_detection_model(small_cfg())
    with caplog.at_level(logging.WARNING):
        DetectronCheckpointer(small_cfg(), model).load_weights(_save(old_state))
    assert "module names of maskrcnn_benchmark 0.1.0" in caplog.text
    new = model.state_dict()
    pairs = {"backbone.fpn.inner_blocks.0.weight": "backbone.fpn.fpn_inner1.weight",
             "backbone.fpn.layer_blocks.3.bias": "backbone.fpn.fpn_layer4.bias",
             "roi_heads.box_predictor.cls_score.weight": "roi_heads.box.predictor.cls_score.weight",
             "roi_heads.mask_feature_extractor.blocks.1.weight": "roi_heads.mask.feature_extractor.mask_fcn2.weight",
             "roi_heads.mask_predictor.mask_fcn_logits.bias": "roi_heads.mask.predictor.mask_fcn_logits.bias",
             "backbone.body.layer2.0.conv1.weight": "backbone.body.layer2.0.conv1.weight"}
    for old, ours in pairs.items():
        assert torch.equal(new[ours], old_state[old]), ours
    assert all(any(torch.equal(new[k], v) for k in new) for v in old_state.values())  # every tensor landed


_saved = []


def _save(obj):
    import tempfile

    fd, path = tempfile.mkstemp(suffix=".pth")
    os.close(fd)
    torch.save(obj, path)
    _saved.append(path)
    return path


def test_module_prefix_both_ways_and_suffix_matching():
    a, b = nn.Sequential(nn.Linear(3, 2)), nn.Sequential(nn.Linear(3, 2))
    wrapped = nn.DataParallel(nn.Sequential(nn.Linear(3, 2)))
    load_state_dict(b, a.state_dict())
    assert torch.equal(b[0].weight, a[0].weight)
    load_state_dict(b, wrapped.state_dict())  # "module." stripped
    assert torch.equal(b[0].weight, wrapped.module[0].weight)
    load_state_dict(wrapped, a.state_dict())  # "module.0.weight" ends with "0.weight"
    assert torch.equal(wrapped.module[0].weight, a[0].weight)
    c = nn.Sequential(nn.Sequential(nn.Linear(3, 2)))  # keys 0.0.weight, 0.0.bias
    load_state_dict(c, {"0.weight": torch.ones(2, 3), "0.0.weight": torch.full((2, 3), 2.0), "bias": torch.ones(2)})
    assert torch.equal(c[0][0].weight, torch.full((2, 3), 2.0))  # the longest loaded key the model key ends with
    assert torch.equal(c[0][0].bias, torch.ones(2))
    d = nn.Sequential(nn.Linear(3, 2))
    load_state_dict(d, {"x.0.weight": torch.ones(2, 3)})  # not a suffix of any model key: nothing loaded
    assert not torch.equal(d[0].weight, torch.ones(2, 3))
    e = nn.ModuleDict({"fc6": nn.Linear(3, 2)})
    load_state_dict(e, {"c6.weight": torch.ones(2, 3)})  # suffixes start at a "." boundary
    assert not torch.equal(e["fc6"].weight, torch.ones(2, 3))
    with pytest.raises(ValueError, match="0.0.weight.*shape"):
        load_state_dict(c, {"0.weight": torch.ones(4, 3)})


def test_checkpointer_api_of_the_reference(tmp_path):
    trained, fresh = nn.Linear(3, 2), nn.Linear(3, 2)
    Checkpointer(trained, save_dir=str(tmp_path), save_to_disk=True).save("checkpoint_file", iteration=7)
    same_folder = Checkpointer(fresh, save_dir=str(tmp_path))
    assert same_folder.has_checkpoint()
    assert same_folder.get_checkpoint_file() == str(tmp_path / "checkpoint_file.pth")
    # the folder's latest, named explicitly (nothing resumes by surprise: there is no load() without a file)
    extra = same_folder.resume(same_folder.get_checkpoint_file())
    assert extra == {"iteration": 7} and torch.equal(fresh.weight, trained.weight)
    other = Checkpointer(nn.Linear(3, 2), save_dir=str(tmp_path / "empty"))
    assert not other.has_checkpoint() and other.get_checkpoint_file() == ""
    assert not hasattr(other, "load")
    Checkpointer(nn.Linear(3, 2), save_dir=str(tmp_path)).save("not_saved")  # save_to_disk None: nothing
    assert not (tmp_path / "not_saved.pth").exists()


def test_wrong_num_classes_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "c.pth"
    torch.save({"model": build_detection_model(small_cfg()).state_dict()}, path)
    other = build_detection_model(small_cfg("MODEL.ROI_BOX_HEAD.NUM_CLASSES", 7))
    with pytest.raises(WeightsError) as e:
        DetectronCheckpointer(None, other).load_weights(str(path))
    msg = str(e.value)
    assert "\n" not in msg and "c.pth" in msg and "roi_heads.box.predictor.cls_score.weight" in msg


def test_random_bytes_are_not_a_checkpoint_and_no_weights_only_advice(tmp_path):
    path = tmp_path / "junk.pth"
    path.write_bytes(os.urandom(4096))
    with pytest.raises(WeightsError) as e:
        DetectronCheckpointer(None, nn.Linear(1, 1)).load_weights(str(path))
    assert "junk.pth" in str(e.value) and "weights_only" not in str(e.value) and "\n" not in str(e.value)
    # random bytes stop torch's safe unpickler at an unknown opcode ("Unsupported operand"): that is not a file
    # holding Python objects (it said "it could run code"), it is no torch checkpoint
    assert "is not a torch checkpoint" in str(e.value) and "could run code" not in str(e.value)


def test_a_checkpoint_holding_python_objects_is_refused_as_such(tmp_path):
    path = tmp_path / "objects.pth"
    torch.save({"model": {}, "extra": collections.OrderedDict(a=ValueError("x"))}, path)
    with pytest.raises(WeightsError) as e:
        DetectronCheckpointer(None, nn.Linear(1, 1)).load_weights(str(path))
    assert "holds Python objects" in str(e.value) and "objects.pth" in str(e.value)


def test_grad_scaler_state_is_saved_and_resumed(tmp_path):
    model = nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    scaler.scale(torch.ones(()))  # the scale lives on the device once used
    scaler.update(new_scale=256.0)
    path = Checkpointer(model, opt, save_dir=str(tmp_path), save_to_disk=True, scaler=scaler).save("m", iteration=3)
    fresh = torch.amp.GradScaler("cpu")
    extra = Checkpointer(nn.Linear(2, 2), torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1),
                         scaler=fresh).resume(path)
    assert fresh.get_scale() == 256.0 and extra["iteration"] == 3


def test_metric_logger_env_and_imports(tmp_path, monkeypatch):
    from maskrcnn_benchmark.utils.env import setup_environment
    from maskrcnn_benchmark.utils.imports import import_file
    from maskrcnn_benchmark.utils.metric_logger import MetricLogger

    meter = MetricLogger()
    for i in range(10):
        meter.update(metric=float(i))
    m = meter.meters["metric"]
    assert (m.count, m.total, m.median, m.avg, m.global_avg) == (10, 45, 4, 4.5, 4.5)
    assert meter.metric is m and meter.delimiter == "\t"
    with pytest.raises(AttributeError):
        meter.not_existent  # noqa: B018
    env_file = tmp_path / "site_env.py"
    env_file.write_text("import os\ndef setup_environment():\n    os.environ['SITE_ENV_RAN'] = '1'\n")
    monkeypatch.setenv("TORCH_DETECTRON_ENV_MODULE", str(env_file))
    setup_environment()
    assert os.environ.get("SITE_ENV_RAN") == "1"
    assert import_file("x", str(env_file)).setup_environment


def test_resuming_with_another_schedule_is_refused_by_key(tmp_path, caplog):
    """--resume restores the optimizer and the LR schedule of the checkpoint: resumed with SOLVER.BASE_LR 0.16 and
    STEPS (60, 80), the run kept the saved 0.02 and (100, 200) while its MLPerf log said 0.16. Resuming with
    another recipe is one line naming each key that differs; the same recipe resumes; a checkpoint that records
    none (an earlier release's) resumes with a warning."""
    from maskrcnn_benchmark.config import load_config
    from maskrcnn_benchmark.solver import make_lr_scheduler, make_optimizer

    def parts(*opts):
        cfg = load_config(R50_YAML, ["SOLVER.BASE_LR", "0.02", "SOLVER.STEPS", "(100, 200)", *opts])
        model = nn.Linear(3, 2)
        opt = make_optimizer(cfg, model)
        return cfg, model, opt, make_lr_scheduler(cfg, opt)

    cfg, model, opt, sched = parts()
    path = DetectronCheckpointer(cfg, model, opt, sched, str(tmp_path), save_to_disk=True).save("m", iteration=5)
    cfg2, model2, opt2, sched2 = parts("SOLVER.BASE_LR", "0.16", "SOLVER.STEPS", "(60, 80)")
    with pytest.raises(WeightsError) as e:
        DetectronCheckpointer(cfg2, model2, opt2, sched2).resume(path)
    msg = str(e.value)
    assert "\n" not in msg and "m.pth" in msg
    assert "SOLVER.BASE_LR 0.16 (the checkpoint's run: 0.02)" in msg and "SOLVER.STEPS" in msg, msg
    assert "SOLVER.MOMENTUM" not in msg
    cfg3, model3, opt3, sched3 = parts("SOLVER.MAX_ITER", "300")  # a longer run of the same recipe resumes
    assert DetectronCheckpointer(cfg3, model3, opt3, sched3).resume(path)["iteration"] == 5
    assert sched3.milestones == [100, 200] and sched3.base_lrs == [0.02, 0.04]  # weights, biases (BIAS_LR_FACTOR 2)
    data = torch.load(path, weights_only=True)
    data.pop("recipe")
    torch.save(data, tmp_path / "old.pth")
    cfg4, model4, opt4, sched4 = parts("SOLVER.BASE_LR", "0.16")
    with caplog.at_level(logging.WARNING):
        DetectronCheckpointer(cfg4, model4, opt4, sched4).resume(str(tmp_path / "old.pth"))
    assert "records no recipe" in caplog.text



def test_resuming_in_another_dtype_is_refused_and_the_log_names_what_was_restored(tmp_path, caplog):
    """A float32 checkpoint resumed with DTYPE float16 restarted the gradient scaler at 2^16 (the checkpoint has no
    scaler state), a float16 one resumed in float32 dropped its scaler state; both said "gradient scaler
    restored". DTYPE is part of the recorded recipe, and the resume line names only what it restored."""
    from maskrcnn_benchmark.config import load_config
    from maskrcnn_benchmark.solver import make_lr_scheduler, make_optimizer

    def parts(*opts):
        cfg = load_config(R50_YAML, ["DTYPE", "float32", *opts])
        model = nn.Linear(3, 2)
        opt = make_optimizer(cfg, model)
        return cfg, model, opt, make_lr_scheduler(cfg, opt)

    cfg, model, opt, sched = parts()
    path = DetectronCheckpointer(cfg, model, opt, sched, str(tmp_path), save_to_disk=True).save("m", iteration=5)
    cfg2, model2, opt2, sched2 = parts("DTYPE", "float16")
    with pytest.raises(WeightsError) as e:
        DetectronCheckpointer(cfg2, model2, opt2, sched2).resume(path)
    assert "DTYPE float16 (the checkpoint's run: float32)" in str(e.value), str(e.value)
    with caplog.at_level(logging.WARNING):
        DetectronCheckpointer(cfg, *parts()[1:]).resume(path)
    assert "RESUMED from" in caplog.text and "(optimizer and LR schedule restored)" in caplog.text, caplog.text


def test_evaluation_needs_every_tensor_of_a_trained_detector(tmp_path):
    """tools/test_net.py and the Predictor scored whatever they were given: no weights at all (the model's random
    initialization), the ImageNet R-50.pkl of the MLPerf config's MODEL.WEIGHT (random FPN, RPN and heads), a
    checkpoint of the backbone only; each exited 0 with a meaningless AP. Loading for evaluation
    (``complete=True``) takes only a file that sets every tensor; training's MODEL.WEIGHT load is unchanged."""
    cfg = small_cfg()
    model = build_detection_model(cfg)
    full = tmp_path / "full.pth"
    torch.save({"model": model.state_dict()}, full)
    body = tmp_path / "body.pth"
    torch.save({"model": {k: v for k, v in model.state_dict().items() if k.startswith("backbone.body.")}}, body)
    fresh = build_detection_model(cfg)
    DetectronCheckpointer(cfg, fresh).load_weights(str(full), complete=True)
    with pytest.raises(WeightsError) as e:
        DetectronCheckpointer(cfg, fresh).load_weights(str(body), complete=True)
    assert "body.pth" in str(e.value) and "of the model's tensors unset" in str(e.value)
    assert "backbone.fpn" in str(e.value) or "rpn" in str(e.value) or "roi_heads" in str(e.value)
    DetectronCheckpointer(cfg, fresh).load_weights(str(body))  # a training run's start: allowed, as before
    with pytest.raises(WeightsError, match="no weights to evaluate"):
        DetectronCheckpointer(cfg, fresh).load_weights("", complete=True)


def test_resume_needs_the_whole_training_state(tmp_path):
    """--resume promises an exact continuation, but a checkpoint leaving model tensors unset resumed with a warning
    (they kept their initialization), and one without the LR schedule's state restarted the warmup. Both are one
    error line naming the file; a checkpoint with everything resumes."""
    from maskrcnn_benchmark.config import load_config
    from maskrcnn_benchmark.solver import make_lr_scheduler, make_optimizer

    def parts(model):
        cfg = load_config(R50_YAML, [])
        opt = make_optimizer(cfg, model)
        return cfg, model, opt, make_lr_scheduler(cfg, opt)

    cfg, model, opt, sched = parts(nn.Linear(3, 2))
    path = DetectronCheckpointer(cfg, model, opt, sched, str(tmp_path), save_to_disk=True).save("m", iteration=5)
    assert DetectronCheckpointer(*parts(nn.Linear(3, 2))).resume(path)["iteration"] == 5
    bigger = nn.Sequential()
    bigger.add_module("weight_holder", nn.Linear(3, 2))
    data = torch.load(path, weights_only=True)
    data["model"] = {"weight_holder.weight": data["model"]["weight"]}  # the bias left out
    torch.save(data, tmp_path / "partial.pth")
    with pytest.raises(WeightsError) as e:
        DetectronCheckpointer(*parts(bigger)).resume(str(tmp_path / "partial.pth"))
    assert "partial.pth" in str(e.value) and "weight_holder.bias" in str(e.value)
    data = torch.load(path, weights_only=True)
    data.pop("scheduler")
    torch.save(data, tmp_path / "nosched.pth")
    with pytest.raises(WeightsError) as e:
        DetectronCheckpointer(*parts(nn.Linear(3, 2))).resume(str(tmp_path / "nosched.pth"))
    assert "nosched.pth" in str(e.value) and "scheduler" in str(e.value)


def test_training_weights_that_set_none_of_the_backbone_are_refused(tmp_path):
    """A ``.pth`` whose names fit no backbone tensor (here every key under an extra ``model.`` prefix, which
    suffix matching cannot strip) loaded with a warning only: the run then trained a random, partly frozen
    backbone that can never converge. Refused as R-50.pkl's blobs are (test_c2_loading)."""
    state = build_detection_model(small_cfg()).state_dict()
    path = tmp_path / "prefixed.pth"
    torch.save({"model." + k: v for k, v in state.items()}, path)
    with pytest.raises(WeightsError) as e:
        DetectronCheckpointer(small_cfg(), build_detection_model(small_cfg())).load_weights(str(path))
    body = [k for k in state if k.startswith("backbone.body.") and not k.endswith(("running_mean", "running_var"))]
    msg = str(e.value)
    assert "\n" not in msg and "prefixed.pth" in msg
    assert f"leaves {len(body)} of the backbone's {len(body)} tensors unset" in msg
    # the same weights under their own names load (a backbone-only file too: the heads keep their initialization)
    torch.save(state, path)
    DetectronCheckpointer(small_cfg(), build_detection_model(small_cfg())).load_weights(str(path))
    torch.save({k: v for k, v in state.items() if k.startswith("backbone.body.")}, path)
    DetectronCheckpointer(small_cfg(), build_detection_model(small_cfg())).load_weights(str(path))


def test_the_last_checkpoint_is_found_from_any_directory(tmp_path, monkeypatch):
    """A run with a relative OUTPUT_DIR (the default is ".") tagged "./model_final.pth", which test_net, run
    later from another directory with the folder given absolute, read against its own working directory: the
    file was missing there, or another run's model_final.pth was evaluated without a word."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    Checkpointer(nn.Linear(3, 2), save_dir=".", save_to_disk=True).save("model_final")
    monkeypatch.chdir(tmp_path / "b")
    torch.save({"model": nn.Linear(3, 2).state_dict()}, "model_final.pth")  # another run's file, here
    found = Checkpointer(nn.Linear(3, 2), save_dir=str(tmp_path / "a")).get_checkpoint_file()
    assert os.path.samefile(found, tmp_path / "a" / "model_final.pth")
    # a tag of the reference (a path relative to where that run started) names a file of the folder
    (tmp_path / "a" / "last_checkpoint").write_text("output/model_final.pth")
    assert os.path.samefile(Checkpointer(None, save_dir=str(tmp_path / "a")).get_checkpoint_file(),
                            tmp_path / "a" / "model_final.pth")


def test_a_copied_run_folder_resumes_from_its_own_checkpoint(tmp_path):
    """A run folder copied aside (archived) keeps the absolute tag of the folder it was written in; that folder,
    reused by a later run, holds a new file of the same name. The copy's own file is the one its tag means."""
    first = tmp_path / "run"
    first.mkdir()
    Checkpointer(nn.Linear(3, 2), save_dir=str(first), save_to_disk=True).save("model_0000005", iteration=5)
    copy = tmp_path / "archive"
    shutil.copytree(first, copy)
    assert (copy / "last_checkpoint").read_text().strip() == str(first / "model_0000005.pth")
    torch.save({"model": nn.Linear(3, 2).state_dict(), "iteration": 5}, first / "model_0000005.pth")  # a later run
    assert os.path.samefile(Checkpointer(None, save_dir=str(copy)).get_checkpoint_file(),
                            copy / "model_0000005.pth")


def test_torchvision_resnet_weights_under_detectrons_input_conventions_are_named(tmp_path, caplog):
    """A torchvision ResNet state dict (conv1.weight, layer1.0..., fc.weight) loads into the backbone by its names'
    suffixes, as the reference loads it; its ImageNet training saw RGB in [0, 1] divided by ImageNet's std and the
    stride in the 3x3 convolution, while the MLPerf config is Detectron's MSRA R-50's (BGR 0-255, std 1, stride in
    the 1x1): a silently worse run. The load says so in one warning; a config set for those weights loads quietly."""
    from maskrcnn_benchmark.config import merge_cfg_from_list
    from maskrcnn_benchmark.utils.checkpoint import DetectronCheckpointer

    cfg = small_cfg()
    model = build_detection_model(cfg)
    body = {k[len("backbone.body."):].replace("stem.", ""): v for k, v in model.state_dict().items()
            if k.startswith("backbone.body.")}
    body["fc.weight"], body["fc.bias"] = torch.zeros(1000, 8), torch.zeros(1000)
    torch.save(body, tmp_path / "resnet.pth")
    with caplog.at_level(logging.WARNING):
        DetectronCheckpointer(cfg, model).load_weights(str(tmp_path / "resnet.pth"))
    warned = [r.getMessage() for r in caplog.records if "torchvision" in r.getMessage()]
    assert len(warned) == 1 and "resnet.pth" in warned[0] and "INPUT.TO_BGR255" in warned[0], warned
    caplog.clear()
    merge_cfg_from_list(cfg, ["MODEL.RESNETS.STRIDE_IN_1X1", False, "INPUT.TO_BGR255", False,
                              "INPUT.PIXEL_MEAN", [0.485, 0.456, 0.406], "INPUT.PIXEL_STD", [0.229, 0.224, 0.225]])
    with caplog.at_level(logging.WARNING):
        DetectronCheckpointer(cfg, build_detection_model(cfg)).load_weights(str(tmp_path / "resnet.pth"))
    assert not [r for r in caplog.records if "torchvision" in r.getMessage()]
