"""Every MLPerf log key this benchmark emits, in one place (on ``mlperf_logging.mllog``).

Lines are written by rank 0 only (unless ``all_ranks``), to stdout and to a file, each as one ``write`` of a
complete ``:::MLLOG {...}`` line so nothing else can interleave inside it. ``ruleset`` switches the extra keys
of newer rulesets (``gradient_accumulation_steps`` from 1.0.0; ``weights_initialization`` for 1.1.0-2.1.0).
"""
import logging
import os
import socket
import sys

BENCHMARK = "maskrcnn"

# 1.1.0-2.1.0 closed maskrcnn: the layers whose initialization must be logged (as the reference names them).
WEIGHTS_INIT_TENSORS = (
    [f"FPN_inner_block{i}" for i in range(1, 5)] + [f"FPN_layer_block{i}" for i in range(1, 5)]
    + ["RPNHead_conv", "RPNHead_cls", "RPNHead_bbox", "ROI_BOX_FEATURE_EXTRACTOR_fc6",
       "ROI_BOX_FEATURE_EXTRACTOR_fc7", "ROI_BOX_PREDICTOR_cls", "ROI_BOX_PREDICTOR_bbox"]
    + [f"ROI_MASK_FEATURE_EXTRACTOR_fcn{i}" for i in range(1, 5)]
    + ["ROI_MASK_PREDICTOR_fcn5", "ROI_MASK_PREDICTOR_fcn_logits"]
)


def _version(ruleset):
    return tuple(int(x) for x in ruleset.split(".")[:3])


class _LineHandler(logging.StreamHandler):
    """Writes each record as a single ``write`` + flush of the whole line."""

    def emit(self, record):
        try:
            self.stream.write(self.format(record) + "\n")
            self.flush()
        except Exception:
            self.handleError(record)


class MLPerfLogger:
    def __init__(self, filename=None, rank=0, ruleset="0.7.0", stream=None):
        try:
            from mlperf_logging.mllog import constants, mllog
        except ImportError:
            raise RuntimeError("mlperf-logging is required for MLPerf runs: pip install mlperf-logging") from None
        self.rank = rank
        self.ruleset = ruleset
        self.filename = filename
        logger = logging.getLogger(f"maskrcnn_benchmark.mllog.{id(self)}")
        logger.propagate = False
        logger.setLevel(logging.INFO)
        if rank == 0:
            logger.addHandler(_LineHandler(stream or sys.stdout))
            if filename:
                os.makedirs(os.path.dirname(os.path.abspath(filename)), exist_ok=True)
                logger.addHandler(_LineHandler(open(filename, "a", buffering=1)))
        self._logger = logger
        self._mllog = mllog.MLLogger(logger=logger, default_stack_offset=2, root_dir=os.getcwd())
        self.constants = constants
        self.logged = set()

    def close(self):
        for h in list(self._logger.handlers):
            h.close()
            self._logger.removeHandler(h)

    def _emit(self, fn, key, value=None, metadata=None, all_ranks=False):
        self.logged.add(key)
        if self.rank == 0 or all_ranks:
            fn(key=key, value=value, metadata=metadata, stack_offset=3)

    def event(self, key, value=None, metadata=None, all_ranks=False):
        self._emit(self._mllog.event, key, value, metadata, all_ranks)

    def start(self, key, value=None, metadata=None, all_ranks=False):
        self._emit(self._mllog.start, key, value, metadata, all_ranks)

    def end(self, key, value=None, metadata=None, all_ranks=False):
        self._emit(self._mllog.end, key, value, metadata, all_ranks)

    # -- key groups -----------------------------------------------------------------------------------------
    def submission_info(self, org=None, platform=None, division=None, status=None, num_nodes=1):
        """submission_* keys; defaults from MLPERF_SUBMISSION_{ORG,PLATFORM,DIVISION,STATUS}."""
        env = os.environ.get
        self.event("submission_benchmark", BENCHMARK)
        self.event("submission_org", org or env("MLPERF_SUBMISSION_ORG", "reference-implementation"))
        self.event("submission_division", division or env("MLPERF_SUBMISSION_DIVISION", "closed"))
        self.event("submission_status", status or env("MLPERF_SUBMISSION_STATUS", "onprem"))
        self.event("submission_platform",
                   platform or env("MLPERF_SUBMISSION_PLATFORM", f"{num_nodes}x{socket.gethostname()}"))

    def hyperparameters(self, cfg, world_size):
        """global_batch_size, num_image_candidates, opt_*, image sizes (and newer rulesets' keys)."""
        s, rpn = cfg.SOLVER, cfg.MODEL.RPN
        per_gpu = s.IMS_PER_BATCH // max(world_size, 1)
        candidates = rpn.FPN_POST_NMS_TOP_N_TRAIN if rpn.FPN_POST_NMS_PER_BATCH else \
            rpn.FPN_POST_NMS_TOP_N_TRAIN * per_gpu
        self.event("global_batch_size", s.IMS_PER_BATCH)
        self.event("num_image_candidates", candidates)
        self.event("opt_name", "sgd_with_momentum")
        self.event("opt_base_learning_rate", s.BASE_LR)
        self.event("opt_learning_rate_warmup_steps", s.WARMUP_ITERS)
        self.event("opt_learning_rate_warmup_factor", s.WARMUP_FACTOR)
        self.event("opt_learning_rate_decay_factor", s.GAMMA)
        self.event("opt_learning_rate_decay_steps", list(s.STEPS))
        self.event("min_image_size", cfg.INPUT.MIN_SIZE_TRAIN[0])
        self.event("max_image_size", cfg.INPUT.MAX_SIZE_TRAIN)
        v = _version(self.ruleset)
        if v >= (1, 0, 0):
            self.event("gradient_accumulation_steps", 1)
        if (1, 1, 0) <= v <= (2, 1, 0):
            for tensor in WEIGHTS_INIT_TENSORS:
                self.event("weights_initialization", metadata={"tensor": tensor})


class NullLogger:
    """Stands in for MLPerfLogger where no MLPerf log is wanted (tests, tools)."""

    def __getattr__(self, name):
        return lambda *a, **k: None
