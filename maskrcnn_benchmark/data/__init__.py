"""Data pipeline: COCO-format datasets, transforms, samplers, loaders (and the synthetic dataset generator).

Imports are lazy so that the synthetic dataset generator (:mod:`.synthetic`) starts without loading torch.
"""


def __getattr__(name):
    if name in ("build_dataset", "make_data_loader"):
        from . import build

        return getattr(build, name)
    raise AttributeError(name)


__all__ = ["build_dataset", "make_data_loader"]
