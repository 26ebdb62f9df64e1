from .transforms import (Compose, Normalize, RandomHorizontalFlip, Resize, ToNormalizedTensor,  # noqa: F401
                         ToTensor, build_transforms)
