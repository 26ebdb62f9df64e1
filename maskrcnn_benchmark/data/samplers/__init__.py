from .samplers import DistributedSampler, GroupedBatchSampler, IterationBasedBatchSampler  # noqa: F401
