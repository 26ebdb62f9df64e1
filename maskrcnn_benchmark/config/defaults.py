"""Default configuration.

Key names and default values are those of NVIDIA's MLPerf v0.7 ``maskrcnn_benchmark/config/defaults.py`` so that
existing YAML files and ``EXTRA_CONFIG`` strings merge unchanged. Keys this package adds are marked "(added)".
Convention: a ``_TRAIN`` suffix is a training-only value, ``_TEST`` an inference-only value.
"""
import os

from yacs.config import CfgNode as CN

_C = CN()

_C.MODEL = CN()
_C.MODEL.RPN_ONLY = False
_C.MODEL.MASK_ON = False
_C.MODEL.RETINANET_ON = False
_C.MODEL.KEYPOINT_ON = False
_C.MODEL.DEVICE = "cuda"
_C.MODEL.META_ARCHITECTURE = "GeneralizedRCNN"
_C.MODEL.CLS_AGNOSTIC_BBOX_REG = False
# Path to weights; "catalog://..." names are resolved through the paths catalog.
_C.MODEL.WEIGHT = ""

# ---------------------------------------------------------------------------
# Input
# ---------------------------------------------------------------------------
_C.INPUT = CN()
_C.INPUT.MIN_SIZE_TRAIN = (800,)
_C.INPUT.MAX_SIZE_TRAIN = 1333
_C.INPUT.MIN_SIZE_TEST = 800
_C.INPUT.MAX_SIZE_TEST = 1333
# Caffe2 ImageNet means, BGR order, 0-255 range.
_C.INPUT.PIXEL_MEAN = [102.9801, 115.9465, 122.7717]
_C.INPUT.PIXEL_STD = [1.0, 1.0, 1.0]
_C.INPUT.TO_BGR255 = True
# Probability of the horizontal flip (the only augmentation MLPerf allows). (added)
_C.INPUT.HORIZONTAL_FLIP_PROB_TRAIN = 0.5

# ---------------------------------------------------------------------------
# Datasets: names resolved by PATHS_CATALOG, or "coco:IMAGE_DIR:ANN_FILE" for any COCO-format dataset.
# ---------------------------------------------------------------------------
_C.DATASETS = CN()
_C.DATASETS.TRAIN = ()
_C.DATASETS.TEST = ()
# Root folder that catalog entries are relative to; "" means $DATADIR or "datasets". (added)
_C.DATASETS.DATA_DIR = ""

# ---------------------------------------------------------------------------
# Data loader
# ---------------------------------------------------------------------------
_C.DATALOADER = CN()
_C.DATALOADER.NUM_WORKERS = 4
_C.DATALOADER.SIZE_DIVISIBILITY = 0
_C.DATALOADER.ASPECT_RATIO_GROUPING = True
# The hybrid input path (NVIDIA's key, v1.0+): loader workers only decode the images to uint8; the training device
# resizes, flips and normalizes each batch. None (added default): on when MODEL.DEVICE is cuda. False is the
# reference path (PIL in the workers); both give the same pixels (docs/numerics.md).
_C.DATALOADER.HYBRID = None
# Keep the evaluation images on the device across epochs (hybrid path; NVIDIA's CACHE_EVAL_IMAGES). (added)
_C.DATALOADER.CACHE_EVAL_IMAGES = False
# Ground-truth slots per image of a compiled (static-shape) training step (NVIDIA's key and COCO value). An image
# with more keeps all of them: its batch takes the next multiple of 32 slots (one more compiled shape, a warning).
_C.DATALOADER.MAX_ANNOTATIONS_PER_IMAGE = 96
# Padded image sizes per orientation of a compiled training step (added; NVIDIA's v1.0+ code calls it
# CUDA_GRAPH_NUM_SHAPES_PER_ORIENTATION): widths from the 4:3 size to the largest, so a 4:3 COCO batch is
# padded to 800x1088, not 800x1344. Each size is one more compiled graph (compiled before run_start); without
# ASPECT_RATIO_GROUPING one more, the square of the largest, for batches that mix orientations (more than one
# image per GPU).
_C.DATALOADER.STATIC_SHAPES_PER_ORIENTATION = 3
# Polygon padding of a compiled training step's batches, (vertices, parts) per ground-truth mask: each batch pads
# its masks' polygons to the largest counts in it rounded up to powers of two, at least these (added). The counts
# are dynamic dimensions of the compiled step (no recompile), but CUDA graphs record one graph per distinct value:
# floors that most batches fit in keep the graphs to the ones the warm-up records. None: (256, 8) with CUDA graphs
# (COMPILE_MODE reduce-overhead or max-autotune), else (16, 4).
_C.DATALOADER.STATIC_POLYGON_SLOTS = None

# ---------------------------------------------------------------------------
# Backbone
# ---------------------------------------------------------------------------
_C.MODEL.BACKBONE = CN()
# Registry name of the body, e.g. "R-50-FPN".
_C.MODEL.BACKBONE.CONV_BODY = "R-50-C4"
# Stages up to and including this one are frozen (0 = nothing frozen; 1 = stem; 2 = stem + res2).
_C.MODEL.BACKBONE.FREEZE_CONV_BODY_AT = 2
_C.MODEL.BACKBONE.OUT_CHANNELS = 256 * 4
_C.MODEL.BACKBONE.USE_GN = False

_C.MODEL.FPN = CN()
_C.MODEL.FPN.USE_GN = False
_C.MODEL.FPN.USE_RELU = False

_C.MODEL.GROUP_NORM = CN()
_C.MODEL.GROUP_NORM.DIM_PER_GP = -1
_C.MODEL.GROUP_NORM.NUM_GROUPS = 32
_C.MODEL.GROUP_NORM.EPSILON = 1e-5

# ---------------------------------------------------------------------------
# RPN
# ---------------------------------------------------------------------------
_C.MODEL.RPN = CN()
_C.MODEL.RPN.USE_FPN = False
_C.MODEL.RPN.ANCHOR_SIZES = (32, 64, 128, 256, 512)
_C.MODEL.RPN.ANCHOR_STRIDE = (16,)
_C.MODEL.RPN.ASPECT_RATIOS = (0.5, 1.0, 2.0)
# Anchors that cross the image border by more than this many pixels are ignored in training (-1 disables).
_C.MODEL.RPN.STRADDLE_THRESH = 0
_C.MODEL.RPN.FG_IOU_THRESHOLD = 0.7
_C.MODEL.RPN.BG_IOU_THRESHOLD = 0.3
_C.MODEL.RPN.BATCH_SIZE_PER_IMAGE = 256
_C.MODEL.RPN.POSITIVE_FRACTION = 0.5
# With FPN these are per level.
_C.MODEL.RPN.PRE_NMS_TOP_N_TRAIN = 12000
_C.MODEL.RPN.PRE_NMS_TOP_N_TEST = 6000
_C.MODEL.RPN.POST_NMS_TOP_N_TRAIN = 2000
_C.MODEL.RPN.POST_NMS_TOP_N_TEST = 1000
_C.MODEL.RPN.NMS_THRESH = 0.7
_C.MODEL.RPN.MIN_SIZE = 0
# Proposals kept after merging the FPN levels. In training this is per GPU batch when
# FPN_POST_NMS_PER_BATCH is True (MLPerf v0.7 semantics, logged as num_image_candidates), else per image.
_C.MODEL.RPN.FPN_POST_NMS_TOP_N_TRAIN = 2000
_C.MODEL.RPN.FPN_POST_NMS_TOP_N_TEST = 2000
# (added; upstream maskrcnn-benchmark name) True: the training top-N is taken over the whole batch.
_C.MODEL.RPN.FPN_POST_NMS_PER_BATCH = True
_C.MODEL.RPN.RPN_HEAD = "SingleConvRPNHead"

# ---------------------------------------------------------------------------
# ROI heads
# ---------------------------------------------------------------------------
_C.MODEL.ROI_HEADS = CN()
_C.MODEL.ROI_HEADS.USE_FPN = False
_C.MODEL.ROI_HEADS.FG_IOU_THRESHOLD = 0.5
_C.MODEL.ROI_HEADS.BG_IOU_THRESHOLD = 0.5
_C.MODEL.ROI_HEADS.BBOX_REG_WEIGHTS = (10.0, 10.0, 5.0, 5.0)
_C.MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE = 512
_C.MODEL.ROI_HEADS.POSITIVE_FRACTION = 0.25
_C.MODEL.ROI_HEADS.SCORE_THRESH = 0.05
_C.MODEL.ROI_HEADS.NMS = 0.5
_C.MODEL.ROI_HEADS.DETECTIONS_PER_IMG = 100

_C.MODEL.ROI_BOX_HEAD = CN()
_C.MODEL.ROI_BOX_HEAD.FEATURE_EXTRACTOR = "ResNet50Conv5ROIFeatureExtractor"
_C.MODEL.ROI_BOX_HEAD.PREDICTOR = "FastRCNNPredictor"
_C.MODEL.ROI_BOX_HEAD.POOLER_RESOLUTION = 14
_C.MODEL.ROI_BOX_HEAD.POOLER_SAMPLING_RATIO = 0
_C.MODEL.ROI_BOX_HEAD.POOLER_SCALES = (1.0 / 16,)
_C.MODEL.ROI_BOX_HEAD.NUM_CLASSES = 81
_C.MODEL.ROI_BOX_HEAD.MLP_HEAD_DIM = 1024
_C.MODEL.ROI_BOX_HEAD.USE_GN = False
_C.MODEL.ROI_BOX_HEAD.DILATION = 1
_C.MODEL.ROI_BOX_HEAD.CONV_HEAD_DIM = 256
_C.MODEL.ROI_BOX_HEAD.NUM_STACKED_CONVS = 4

_C.MODEL.ROI_MASK_HEAD = CN()
_C.MODEL.ROI_MASK_HEAD.FEATURE_EXTRACTOR = "ResNet50Conv5ROIFeatureExtractor"
_C.MODEL.ROI_MASK_HEAD.PREDICTOR = "MaskRCNNC4Predictor"
_C.MODEL.ROI_MASK_HEAD.POOLER_RESOLUTION = 14
_C.MODEL.ROI_MASK_HEAD.POOLER_SAMPLING_RATIO = 0
_C.MODEL.ROI_MASK_HEAD.POOLER_SCALES = (1.0 / 16,)
_C.MODEL.ROI_MASK_HEAD.MLP_HEAD_DIM = 1024
_C.MODEL.ROI_MASK_HEAD.CONV_LAYERS = (256, 256, 256, 256)
_C.MODEL.ROI_MASK_HEAD.RESOLUTION = 14
_C.MODEL.ROI_MASK_HEAD.SHARE_BOX_FEATURE_EXTRACTOR = True
_C.MODEL.ROI_MASK_HEAD.POSTPROCESS_MASKS = False
_C.MODEL.ROI_MASK_HEAD.POSTPROCESS_MASKS_THRESHOLD = 0.5
_C.MODEL.ROI_MASK_HEAD.DILATION = 1
_C.MODEL.ROI_MASK_HEAD.USE_GN = False

_C.MODEL.ROI_KEYPOINT_HEAD = CN()
_C.MODEL.ROI_KEYPOINT_HEAD.FEATURE_EXTRACTOR = "KeypointRCNNFeatureExtractor"
_C.MODEL.ROI_KEYPOINT_HEAD.PREDICTOR = "KeypointRCNNPredictor"
_C.MODEL.ROI_KEYPOINT_HEAD.POOLER_RESOLUTION = 14
_C.MODEL.ROI_KEYPOINT_HEAD.POOLER_SAMPLING_RATIO = 0
_C.MODEL.ROI_KEYPOINT_HEAD.POOLER_SCALES = (1.0 / 16,)
_C.MODEL.ROI_KEYPOINT_HEAD.MLP_HEAD_DIM = 1024
_C.MODEL.ROI_KEYPOINT_HEAD.CONV_LAYERS = tuple(512 for _ in range(8))
_C.MODEL.ROI_KEYPOINT_HEAD.RESOLUTION = 14
_C.MODEL.ROI_KEYPOINT_HEAD.NUM_CLASSES = 17
_C.MODEL.ROI_KEYPOINT_HEAD.SHARE_BOX_FEATURE_EXTRACTOR = True

# ---------------------------------------------------------------------------
# ResNet
# ---------------------------------------------------------------------------
_C.MODEL.RESNETS = CN()
_C.MODEL.RESNETS.NUM_GROUPS = 1
_C.MODEL.RESNETS.WIDTH_PER_GROUP = 64
# MSRA weights put the stride-2 on the 1x1 conv of each bottleneck (True); torchvision/C2 models on the 3x3.
_C.MODEL.RESNETS.STRIDE_IN_1X1 = True
_C.MODEL.RESNETS.TRANS_FUNC = "BottleneckWithFixedBatchNorm"
_C.MODEL.RESNETS.STEM_FUNC = "StemWithFixedBatchNorm"
_C.MODEL.RESNETS.RES5_DILATION = 1
_C.MODEL.RESNETS.RES2_OUT_CHANNELS = 256
_C.MODEL.RESNETS.STEM_OUT_CHANNELS = 64

# ---------------------------------------------------------------------------
# RetinaNet (kept so that upstream configs merge; not implemented)
# ---------------------------------------------------------------------------
_C.MODEL.RETINANET = CN()
_C.MODEL.RETINANET.NUM_CLASSES = 81
_C.MODEL.RETINANET.ANCHOR_SIZES = (32, 64, 128, 256, 512)
_C.MODEL.RETINANET.ASPECT_RATIOS = (0.5, 1.0, 2.0)
_C.MODEL.RETINANET.ANCHOR_STRIDES = (8, 16, 32, 64, 128)
_C.MODEL.RETINANET.STRADDLE_THRESH = 0
_C.MODEL.RETINANET.OCTAVE = 2.0
_C.MODEL.RETINANET.SCALES_PER_OCTAVE = 3
_C.MODEL.RETINANET.USE_C5 = True
_C.MODEL.RETINANET.NUM_CONVS = 4
_C.MODEL.RETINANET.BBOX_REG_WEIGHT = 4.0
_C.MODEL.RETINANET.BBOX_REG_BETA = 0.11
_C.MODEL.RETINANET.PRE_NMS_TOP_N = 1000
_C.MODEL.RETINANET.FG_IOU_THRESHOLD = 0.5
_C.MODEL.RETINANET.BG_IOU_THRESHOLD = 0.4
_C.MODEL.RETINANET.LOSS_ALPHA = 0.25
_C.MODEL.RETINANET.LOSS_GAMMA = 2.0
_C.MODEL.RETINANET.PRIOR_PROB = 0.01
_C.MODEL.RETINANET.INFERENCE_TH = 0.05
_C.MODEL.RETINANET.NMS_TH = 0.4

# ---------------------------------------------------------------------------
# Solver
# ---------------------------------------------------------------------------
_C.SOLVER = CN()
_C.SOLVER.MAX_ITER = 40000
_C.SOLVER.BASE_LR = 0.001
_C.SOLVER.BIAS_LR_FACTOR = 2
_C.SOLVER.MOMENTUM = 0.9
_C.SOLVER.WEIGHT_DECAY = 0.0005
_C.SOLVER.WEIGHT_DECAY_BIAS = 0
_C.SOLVER.GAMMA = 0.1
_C.SOLVER.STEPS = (30000,)
_C.SOLVER.WARMUP_FACTOR = 1.0 / 3
_C.SOLVER.WARMUP_ITERS = 500
# "constant", "linear" or "mlperf_linear".
_C.SOLVER.WARMUP_METHOD = "linear"
_C.SOLVER.CHECKPOINT_PERIOD = 2500
# Global batch: with 8 GPUs and 16 images, each GPU sees 2 images.
_C.SOLVER.IMS_PER_BATCH = 16
# Clip the global gradient norm to this value; 0 disables (added; not used by the closed recipe).
_C.SOLVER.CLIP_GRAD_NORM = 0.0
# A fused SGD (added): apex's FusedSGD where apex imports and builds one, else torch's fused SGD (solver/build.py).
_C.SOLVER.USE_FUSED_SGD = False

# ---------------------------------------------------------------------------
# Test
# ---------------------------------------------------------------------------
_C.TEST = CN()
_C.TEST.EXPECTED_RESULTS = []
_C.TEST.EXPECTED_RESULTS_SIGMA_TOL = 4
_C.TEST.IMS_PER_BATCH = 8
_C.TEST.DETECTIONS_PER_IMG = 100
# COCO scoring backend: "auto" (faster-coco-eval when installed, else pycocotools), "faster_coco_eval" or
# "pycocotools" (the reference). Both give the same numbers. (added)
_C.TEST.COCO_BACKEND = "auto"
# Processes that score COCO (disjoint category sets); 0 = one per core this process may use. (added)
_C.TEST.COCO_WORKERS = 0
# Mask pasting for COCO results: "box" (only inside each expanded box) or "full" (whole image); same RLE. (added)
_C.TEST.MASK_ENCODING = "box"

# ---------------------------------------------------------------------------
# Misc
# ---------------------------------------------------------------------------
_C.OUTPUT_DIR = "."
_C.PATHS_CATALOG = os.path.join(os.path.dirname(__file__), "paths_catalog.py")
_C.SAVE_CHECKPOINTS = False
# Evaluate at the end of every whole epoch (a SOLVER.MAX_ITER inside an epoch ends the run unscored there); False:
# once, after the last iteration.
_C.PER_EPOCH_EVAL = True
# float32, float16 (autocast + gradient scaling) or bfloat16 (autocast).
_C.DTYPE = "float16"
_C.AMP_VERBOSE = False
# channels_last memory format for the convolutions.
_C.NHWC = False
# Compile the training step (torch.compile on the static-shape step: fixed image sizes, padded targets, fused
# SGD with a device-tensor learning rate). None (auto): off, the eager step, measured faster on the CPU, an H200
# and an H100 (docs/benchmarks.md). Also --compile / --no-compile. (added)
_C.COMPILE = None
# torch.compile mode: "auto" is "reduce-overhead" (CUDA graphs) when compiling on one GPU with inductor (1.30x
# "default" on an H100, 1.38x on an H200, in the step bench: docs/benchmarks.md), else "default" (several GPUs
# with CUDA graphs have not run). (added)
_C.COMPILE_MODE = "auto"
# torch.compile backend: "inductor"; "aot_eager" or "eager" trace the same graphs without generating code (to tell
# a tracing problem from a code-generation one, and for quick tests of the compiled path). (added)
_C.COMPILE_BACKEND = "inductor"
_C.DISABLE_REDUCED_LOGGING = False
# Seconds a collective (all-reduce, barrier, gather) waits for the other ranks before the run fails and names
# the rank that stopped answering. Long enough for a COCO evaluation's gather, short enough not to hold a
# cluster allocation for half an hour when a rank hangs. Waits for the background scorer are not bounded by it:
# rank 0 waits in slices and every rank agrees after each (EvaluationHook._wait). (added)
_C.DISTRIBUTED_TIMEOUT = 300

# ---------------------------------------------------------------------------
# MLPerf
# ---------------------------------------------------------------------------
_C.MLPERF = CN()
# Targets for early termination (COCO box and mask AP).
_C.MLPERF.MIN_BBOX_MAP = 0.377
_C.MLPERF.MIN_SEGM_MAP = 0.339
