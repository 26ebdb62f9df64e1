from .transforms import Compose, Normalize, RandomHorizontalFlip, Resize, ToTensor, build_transforms  # noqa: F401
