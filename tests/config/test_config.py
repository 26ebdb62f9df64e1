import pytest

from helpers import R50_YAML
from maskrcnn_benchmark.config import ConfigError, get_cfg, ignored_settings, load_config

# configs/e2e_mask_rcnn_R_50_FPN_1x.yaml of the MLPerf reference (mlcommons/training object_detection) and of
# NVIDIA's v0.7 package: every value it sets that differs from the defaults. Per-system values (LR, steps,
# batch, FPN_POST_NMS_TOP_N_TRAIN) come from config_<SYSTEM>.sh, never from the yaml.
REFERENCE_YAML_DIFF = {
    "MODEL.WEIGHT": "catalog://ImageNetPretrained/MSRA/R-50",
    "MODEL.BACKBONE.CONV_BODY": "R-50-FPN", "MODEL.BACKBONE.OUT_CHANNELS": 256,
    "MODEL.RPN.USE_FPN": True, "MODEL.RPN.ANCHOR_STRIDE": (4, 8, 16, 32, 64),
    "MODEL.RPN.PRE_NMS_TOP_N_TRAIN": 2000, "MODEL.RPN.PRE_NMS_TOP_N_TEST": 1000,
    "MODEL.RPN.FPN_POST_NMS_TOP_N_TEST": 1000,
    "MODEL.ROI_HEADS.USE_FPN": True,
    "MODEL.ROI_BOX_HEAD.POOLER_RESOLUTION": 7, "MODEL.ROI_BOX_HEAD.POOLER_SCALES": (0.25, 0.125, 0.0625, 0.03125),
    "MODEL.ROI_BOX_HEAD.POOLER_SAMPLING_RATIO": 2, "MODEL.ROI_BOX_HEAD.FEATURE_EXTRACTOR": "FPN2MLPFeatureExtractor",
    "MODEL.ROI_BOX_HEAD.PREDICTOR": "FPNPredictor",
    "MODEL.ROI_MASK_HEAD.POOLER_SCALES": (0.25, 0.125, 0.0625, 0.03125),
    "MODEL.ROI_MASK_HEAD.FEATURE_EXTRACTOR": "MaskRCNNFPNFeatureExtractor",
    "MODEL.ROI_MASK_HEAD.POOLER_SAMPLING_RATIO": 2, "MODEL.ROI_MASK_HEAD.RESOLUTION": 28,
    "MODEL.ROI_MASK_HEAD.SHARE_BOX_FEATURE_EXTRACTOR": False, "MODEL.MASK_ON": True,
    "DATASETS.TRAIN": ("coco_2017_train",), "DATASETS.TEST": ("coco_2017_val",),
    "DATALOADER.SIZE_DIVISIBILITY": 32, "SOLVER.BASE_LR": 0.02, "SOLVER.WEIGHT_DECAY": 0.0001,
    "SOLVER.STEPS": (60000, 80000), "SOLVER.MAX_ITER": 90000,
}


def _flat(node, prefix=""):
    for k, v in node.items():
        if hasattr(v, "items"):
            yield from _flat(v, prefix + k + ".")
        else:
            yield prefix + k, v


def test_r50_yaml_sets_exactly_the_reference_values():
    default = dict(_flat(get_cfg()))
    ours = dict(_flat(load_config(R50_YAML)))
    diff = {k: v for k, v in ours.items() if v != default[k]}
    assert diff == REFERENCE_YAML_DIFF


@pytest.mark.parametrize("key,value,message", [
    ("SOLVER.IMS_PER_BATCH", "0", "SOLVER.IMS_PER_BATCH' = 0: must be a positive integer"),
    ("SOLVER.MAX_ITER", "-1", "SOLVER.MAX_ITER' = -1: must be a positive integer"),
    ("SOLVER.STEPS", "(300, 200)", "SOLVER.STEPS' = [300, 200]: must be increasing"),
    ("MODEL.ROI_BOX_HEAD.NUM_CLASSES", "1", "NUM_CLASSES' = 1"),
    ("DTYPE", "float8", "DTYPE' = 'float8'"),
    ("MODEL.RPN.POSITIVE_FRACTION", "1.5", "POSITIVE_FRACTION' = 1.5"),
    # accepted before, and a cuda:1 run then trained on the CPU (init_distributed and the loader's pinning
    # compared the name with "cuda")
    ("MODEL.DEVICE", "cuda:1", "MODEL.DEVICE' = 'cuda:1': must be cpu or cuda"),
    # each ended in a TypeError or AttributeError traceback (exit 5), or later in the loader
    ("SOLVER.BASE_LR", "None", "'SOLVER.BASE_LR' in command line expects float, got no value (None)"),
    ("SOLVER.STEPS", "None", "'SOLVER.STEPS' in command line expects tuple, got no value (None)"),
    ("INPUT.PIXEL_MEAN", "['a', 'b', 'c']", "'INPUT.PIXEL_MEAN' in command line expects a list of float"),
    ("SOLVER.STEPS", "(300.5, 400)", "'SOLVER.STEPS' in command line expects a list of int"),
    ("DATASETS.TRAIN", "(1,)", "'DATASETS.TRAIN' in command line expects a list of str, got [1]"),
    ("DATALOADER.STATIC_POLYGON_SLOTS", "(256, 0)", "STATIC_POLYGON_SLOTS' = (256, 0): must be None or two"),
    ("DATALOADER.STATIC_POLYGON_SLOTS", "256", "STATIC_POLYGON_SLOTS' = 256: must be None or two"),
    ("DATALOADER.STATIC_POLYGON_SLOTS", "(256, 1)", "STATIC_POLYGON_SLOTS' = (256, 1): must be None or two"),
    # each built a model that failed later (a shape error at the first batch) or normalized by zero (inf pixels)
    ("INPUT.PIXEL_STD", "[0.0, 0.0, 0.0]", "'INPUT.PIXEL_STD' = [0.0, 0.0, 0.0]: must hold 3 positive numbers"),
    ("INPUT.PIXEL_MEAN", "[1.0, 2.0]", "'INPUT.PIXEL_MEAN' = [1.0, 2.0]: must hold 3 numbers"),
    ("MODEL.ROI_HEADS.BBOX_REG_WEIGHTS", "(10.0, 10.0)", "BBOX_REG_WEIGHTS' = (10.0, 10.0): must hold 4 positive"),
    ("MODEL.ROI_BOX_HEAD.POOLER_RESOLUTION", "0", "POOLER_RESOLUTION' = 0: must be a positive integer"),
    ("MODEL.ROI_MASK_HEAD.POOLER_RESOLUTION", "0", "POOLER_RESOLUTION' = 0: must be a positive integer"),
    ("MODEL.BACKBONE.OUT_CHANNELS", "0", "OUT_CHANNELS' = 0: must be a positive integer"),
    ("MODEL.ROI_BOX_HEAD.POOLER_SCALES", "(0.25,)", "'MODEL.ROI_BOX_HEAD.POOLER_SCALES' = (0.25,): must hold "
     "one scale per level of MODEL.ROI_MASK_HEAD.POOLER_SCALES"),
    # each a traceback (exit 5) in the model, or a model that trained on wrong anchors or pooled zeros
    ("MODEL.RPN.ANCHOR_STRIDE", "(4, 8, 16, 32)", "'MODEL.RPN.ANCHOR_STRIDE' = (4, 8, 16, 32): must hold one "
     "stride per FPN level"),
    ("MODEL.RPN.ANCHOR_STRIDE", "(16,)", "'MODEL.RPN.ANCHOR_STRIDE' = (16,)"),
    ("MODEL.RPN.ANCHOR_SIZES", "(32, 64, 128, 256)", "'MODEL.RPN.ANCHOR_SIZES' = (32, 64, 128, 256)"),
    ("MODEL.RPN.ASPECT_RATIOS", "()", "'MODEL.RPN.ASPECT_RATIOS' = ()"),
    ("MODEL.ROI_BOX_HEAD.POOLER_SCALES", "(0.03125, 0.0625, 0.125, 0.25)",
     "'MODEL.ROI_BOX_HEAD.POOLER_SCALES' = (0.03125, 0.0625, 0.125, 0.25): must be the FPN's P2, P3, ... scales"),
    ("MODEL.ROI_MASK_HEAD.POOLER_SCALES", "(0.25, 0.0625, 0.03125, 0.015625)",
     "'MODEL.ROI_MASK_HEAD.POOLER_SCALES' = (0.25, 0.0625"),
    ("MODEL.RPN.BG_IOU_THRESHOLD", "0.8", "'MODEL.RPN.BG_IOU_THRESHOLD' = 0.8: must not exceed "
     "MODEL.RPN.FG_IOU_THRESHOLD (0.7)"),
    ("MODEL.ROI_HEADS.BG_IOU_THRESHOLD", "0.6", "'MODEL.ROI_HEADS.BG_IOU_THRESHOLD' = 0.6"),
    ("MODEL.ROI_MASK_HEAD.CONV_LAYERS", "()", "'MODEL.ROI_MASK_HEAD.CONV_LAYERS' = ()"),
    ("MODEL.RESNETS.NUM_GROUPS", "0", "'MODEL.RESNETS.NUM_GROUPS' = 0: must be a positive integer"),
    ("SOLVER.BASE_LR", "1e999", "'SOLVER.BASE_LR' = inf"),
    ("SOLVER.MOMENTUM", "float('nan')", "MOMENTUM"),
])
def test_values_that_cannot_work_are_one_line_errors(key, value, message):
    with pytest.raises(ConfigError) as e:
        load_config(R50_YAML, [key, value])
    assert message in str(e.value) and "\n" not in str(e.value)


def test_keys_without_effect_are_reported():
    assert ignored_settings(load_config(R50_YAML)) == []
    cfg = load_config(R50_YAML, ["MODEL.KEYPOINT_ON", "True", "TEST.DETECTIONS_PER_IMG", "50",
                                 "MODEL.RETINANET.NUM_CONVS", "2"])
    assert ignored_settings(cfg) == ["MODEL.KEYPOINT_ON=True", "MODEL.RETINANET.NUM_CONVS=2",
                                     "TEST.DETECTIONS_PER_IMG=50"]


def test_an_empty_value_in_a_yaml_file_names_the_key_and_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("SOLVER:\n  BASE_LR:\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(path))
    assert f"'SOLVER.BASE_LR' in '{path}' expects float, got no value (None)" in str(e.value)


def test_list_values_are_taken_as_the_defaults_items():
    cfg = load_config(R50_YAML, ["INPUT.PIXEL_MEAN", "[102, 115, 122]", "SOLVER.STEPS", "(3e4, 4e4)"])
    assert list(cfg.INPUT.PIXEL_MEAN) == [102.0, 115.0, 122.0] and all(type(x) is float for x in cfg.INPUT.PIXEL_MEAN)
    assert tuple(cfg.SOLVER.STEPS) == (30000, 40000) and all(type(x) is int for x in cfg.SOLVER.STEPS)


def test_a_config_file_that_is_not_text_is_one_line_naming_it(tmp_path):
    """Binary bytes in --config-file ended in a UnicodeDecodeError traceback (exit 5)."""
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"\xff\xfe\x00S\x00O\x00L" + bytes(range(128, 200)))
    with pytest.raises(ConfigError) as e:
        load_config(str(path))
    assert str(e.value).startswith(f"config file '{path}' is not UTF-8 text") and "\n" not in str(e.value)


def test_invalid_yaml_names_the_line_and_column_on_one_line(tmp_path):
    """The YAML error's position sits on its later lines, which the one error line cut off."""
    path = tmp_path / "bad.yaml"
    path.write_text("SOLVER:\n  STEPS: [1, 2\n  BASE_LR: 0.1\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(path))
    msg = str(e.value)
    assert "\n" not in msg and f"config file '{path}' is not valid YAML" in msg
    assert "line 3, column 10" in msg, msg  # PyYAML's mark: the ":" of BASE_LR, where the list was still open


@pytest.mark.parametrize("text", ["TEST:\n", "MODEL: x\n"])
def test_a_section_given_a_value_is_named_as_a_section(tmp_path, text):
    """'TEST:' alone (or 'MODEL: x') was an 'unknown config key' though the key exists: it is a section."""
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    key = text.split(":")[0]
    with pytest.raises(ConfigError) as e:
        load_config(str(path))
    assert f"'{key}' in '{path}' is a section of keys, not a value" in str(e.value)
    assert "unknown" not in str(e.value)


def test_quoted_string_values_lose_their_quotes_as_with_yacs():
    """yacs reads 'OUTPUT_DIR "'/results'"' as /results (literal_eval of the string); we kept the quotes and the run
    wrote into a folder named "'"."""
    cfg = load_config(R50_YAML, ["OUTPUT_DIR", "'/results'", "DTYPE", '"float16"', "MODEL.WEIGHT", "/w/R-50.pkl",
                                 "PATHS_CATALOG", "1e-3"])
    assert (cfg.OUTPUT_DIR, cfg.DTYPE, cfg.MODEL.WEIGHT, cfg.PATHS_CATALOG) == ("/results", "float16", "/w/R-50.pkl",
                                                                               "1e-3")


@pytest.mark.parametrize("key,value", [("MODEL.BACKBONE.CONV_BODY", "R-50-C4"),
                                       ("MODEL.ROI_BOX_HEAD.FEATURE_EXTRACTOR", "ResNet50Conv5ROIFeatureExtractor"),
                                       ("MODEL.META_ARCHITECTURE", "RetinaNet")])
def test_a_model_part_this_package_lacks_is_a_config_error(key, value):
    """A name no registry holds (NVIDIA's default C4 backbone among them) was a KeyError: exit 5, 'internal
    error'. It is bad input: one line naming the key, the value and the names there are (exit 1)."""
    from maskrcnn_benchmark.cli.exit_codes import BAD_INPUT, describe
    from maskrcnn_benchmark.modeling.detector import build_detection_model

    cfg = load_config(R50_YAML, [key, value])
    with pytest.raises(ConfigError) as e:
        build_detection_model(cfg)
    msg = str(e.value)
    assert f"({key}) '{value}'" in msg and "known:" in msg and "\n" not in msg and not msg.startswith("'")
    assert describe(e.value) == (BAD_INPUT.code, msg)


def test_a_model_without_masks_keeps_its_own_box_pooler_scales():
    """The box and mask heads must pool the same levels only where there is a mask head: a Faster R-CNN config
    (MASK_ON False, the reference's e2e_faster_rcnn_R_50_FPN_1x.yaml sets only the box head's scales) is fine."""
    cfg = load_config(R50_YAML, ["MODEL.MASK_ON", "False", "MODEL.ROI_MASK_HEAD.POOLER_SCALES", "(0.0625,)"])
    assert len(cfg.MODEL.ROI_BOX_HEAD.POOLER_SCALES) == 4


def test_a_key_repeated_in_a_yaml_file_is_named(tmp_path):
    """yaml keeps the last of two equal keys: a SOLVER section appended at the bottom of the R-50 file ("my
    overrides") replaced the whole first one, BASE_LR, WEIGHT_DECAY and STEPS back to the defaults, silently."""
    path = tmp_path / "mine.yaml"
    path.write_text(open(R50_YAML).read() + "SOLVER:\n  IMS_PER_BATCH: 32\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(path))
    assert "'SOLVER'" in str(e.value) and "twice" in str(e.value) and str(path) in str(e.value)
    assert "\n" not in str(e.value)


def test_maskrcnn_benchmarks_own_key_for_the_fpn_width_is_taken(tmp_path):
    """facebookresearch/maskrcnn-benchmark's stock R-50-FPN config sets MODEL.RESNETS.BACKBONE_OUT_CHANNELS (NVIDIA
    renamed it MODEL.BACKBONE.OUT_CHANNELS); it was an unknown key whose first suggestion built another model."""
    path = tmp_path / "upstream.yaml"
    path.write_text("MODEL:\n  RESNETS:\n    BACKBONE_OUT_CHANNELS: 128\n")
    from maskrcnn_benchmark.config import merge_cfg_from_file

    assert merge_cfg_from_file(get_cfg(), str(path)).MODEL.BACKBONE.OUT_CHANNELS == 128
    assert load_config(R50_YAML, ["MODEL.RESNETS.BACKBONE_OUT_CHANNELS", "64"]).MODEL.BACKBONE.OUT_CHANNELS == 64


@pytest.mark.parametrize("key,suggested", [("solver.base_lr", "SOLVER.BASE_LR"), ("DATADIR", "DATASETS.DATA_DIR"),
                                           ("NUM_CLASSES", "MODEL.ROI_BOX_HEAD.NUM_CLASSES")])
def test_an_unknown_key_suggests_the_key_in_another_case_or_by_its_last_name(key, suggested):
    with pytest.raises(ConfigError) as e:
        load_config(R50_YAML, [key, "1"])
    assert f"did you mean {suggested}" in str(e.value), str(e.value)


def test_a_frozen_config_is_not_merged_into():
    from maskrcnn_benchmark.config import merge_cfg_from_list

    cfg = load_config(R50_YAML, freeze=True)
    with pytest.raises(ConfigError, match="frozen"):
        merge_cfg_from_list(cfg, ["SOLVER.BASE_LR", "-5"])
    assert cfg.SOLVER.BASE_LR == 0.02


@pytest.mark.parametrize("opts,says", [
    # EXTRA_CONFIG split at spaces (run_and_time.sh reads it as words): a tuple written as the YAML writes it
    (["SOLVER.STEPS", "(12000,", "16000)", "SOLVER.BASE_LR", "0.1"],
     ["'16000)'", "a value split at a space", "(12000,16000)"]),
    # the config file given without --config-file
    (["configs/e2e_mask_rcnn_R_50_FPN_1x.yaml", "SOLVER.BASE_LR", "0.1"],
     ["'configs/e2e_mask_rcnn_R_50_FPN_1x.yaml'", "--config-file"]),
])
def test_an_odd_override_list_names_the_token_that_is_not_a_key(opts, says):
    """The count was judged before the keys: both named the last, well-formed value ("'0.1' has no value")."""
    with pytest.raises(ConfigError) as e:
        load_config("", opts)
    line = str(e.value)
    assert "\n" not in line and all(s in line for s in says), line


def test_a_path_from_the_home_folder_is_the_users_home(tmp_path, monkeypatch):
    """``OUTPUT_DIR: ~/runs/r1`` in a YAML file (no shell expands it there) made a folder named '~' in the
    current directory (a later `rm -rf ~*` away from a disaster), and ``DATA_DIR: ~/coco`` was 'does not exist'."""
    monkeypatch.setenv("HOME", str(tmp_path))
    import yaml

    data = yaml.safe_load(open(R50_YAML))
    data["OUTPUT_DIR"], data["DATASETS"]["DATA_DIR"], data["MODEL"]["WEIGHT"] = \
        "~/runs/r1", "~/coco", "~/models/R-50.pkl"
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(data))
    cfg = load_config(str(f), ["PATHS_CATALOG", "~/catalog.py"])
    assert (cfg.OUTPUT_DIR, cfg.DATASETS.DATA_DIR, cfg.MODEL.WEIGHT, cfg.PATHS_CATALOG) == (
        f"{tmp_path}/runs/r1", f"{tmp_path}/coco", f"{tmp_path}/models/R-50.pkl", f"{tmp_path}/catalog.py")
    assert load_config(R50_YAML).MODEL.WEIGHT == "catalog://ImageNetPretrained/MSRA/R-50"


def test_an_override_list_built_in_code_with_a_number_out_of_step_is_a_config_error():
    """A number in a key's place (a list built in code, out of step: ["INPUT.MIN_SIZE_TEST", 96, 96, ...]) was an
    AttributeError ('int' object has no attribute 'split') once the keys were checked first."""
    with pytest.raises(ConfigError, match="unknown config key '96'"):
        load_config(R50_YAML, ["INPUT.MIN_SIZE_TEST", 96, 96, "TEST.IMS_PER_BATCH", 4])


def test_a_key_whose_default_is_auto_can_be_set_back_to_auto():
    """COMPILE, DATALOADER.HYBRID and STATIC_POLYGON_SLOTS default to None (resolved per device): a config file
    that set one could not be put back to None on the command line ("expects bool, got no value"); yacs takes it."""
    set_first = ["COMPILE", "True", "DATALOADER.HYBRID", "False", "DATALOADER.STATIC_POLYGON_SLOTS", "(256, 8)"]
    cfg = load_config(R50_YAML, set_first + ["COMPILE", "None", "DATALOADER.HYBRID", "None",
                                             "DATALOADER.STATIC_POLYGON_SLOTS", "None"])
    assert cfg.COMPILE is None and cfg.DATALOADER.HYBRID is None and cfg.DATALOADER.STATIC_POLYGON_SLOTS is None
    with pytest.raises(ConfigError, match="expects float, got no value"):  # a key with a value by default
        load_config(R50_YAML, ["SOLVER.BASE_LR", "None"])
