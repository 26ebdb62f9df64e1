from bisect import bisect_right

from torch.optim.lr_scheduler import LRScheduler


class WarmupMultiStepLR(LRScheduler):
    """Step decay by ``gamma`` at ``milestones`` with a warmup over the first ``warmup_iters`` iterations.

    Warmup methods: ``constant`` (lr x factor), ``linear`` (factor -> 1, maskrcnn-benchmark) and
    ``mlperf_linear`` (NVIDIA MLPerf: ``lr = base_lr - (warmup_iters - it) * warmup_factor``, where
    ``warmup_factor`` is an absolute LR increment per iteration, so the LR ramps from about 0 to base_lr).

    The schedule is computed on the host in Python floats; when the optimizer's LR is a device tensor (fused
    SGD) torch writes it in place (``fill_``), which costs no sync.
    """

    def __init__(self, optimizer, milestones, gamma=0.1, warmup_factor=1.0 / 3, warmup_iters=500,
                 warmup_method="linear", last_epoch=-1):
        if list(milestones) != sorted(milestones):
            raise ValueError(f"SOLVER.STEPS must be increasing, got {milestones}")
        if warmup_method not in ("constant", "linear", "mlperf_linear"):
            raise ValueError(f"SOLVER.WARMUP_METHOD must be constant, linear or mlperf_linear, got "
                             f"'{warmup_method}'")
        self.milestones = list(milestones)
        self.gamma = gamma
        self.warmup_factor = warmup_factor
        self.warmup_iters = warmup_iters
        self.warmup_method = warmup_method
        super().__init__(optimizer, last_epoch)
        self.base_lrs = [float(b) for b in self.base_lrs]  # floats (make_optimizer keeps initial_lr a float)

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        self.base_lrs = [float(b) for b in self.base_lrs]

    def lr_at(self, base_lr, it):
        decay = self.gamma ** bisect_right(self.milestones, it)
        if it < self.warmup_iters:
            if self.warmup_method == "constant":
                return base_lr * self.warmup_factor * decay
            if self.warmup_method == "linear":
                alpha = it / self.warmup_iters
                return base_lr * (self.warmup_factor * (1 - alpha) + alpha) * decay
            return (base_lr - (self.warmup_iters - it) * self.warmup_factor) * decay
        return base_lr * decay

    def get_lr(self):
        # As the MLPerf reference (NVIDIA v0.7 steps the scheduler after optimizer.step()), iteration k
        # (1-based) trains with lr_at(k - 1): iteration 1 runs at the start of the warmup (0 for mlperf_linear).
        return [self.lr_at(base, self.last_epoch) for base in self.base_lrs]

    def _get_closed_form_lr(self):
        return self.get_lr()
