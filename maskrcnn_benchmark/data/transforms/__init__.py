from .transforms import Compose, RandomHorizontalFlip, Resize, ToNormalizedTensor, build_transforms  # noqa: F401
