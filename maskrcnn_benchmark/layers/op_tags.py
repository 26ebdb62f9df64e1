"""Tags of the package's custom ops (``torch.library.custom_op``)."""
import torch

# An op whose implementation waits for the host (its work depends on data-dependent sizes: NMS's kept set, the
# polygon rasterizer's vertex count). Inductor's graph partition leaves it out of the CUDA graphs of a compiled
# step and runs it eagerly between them, instead of failing the capture. Empty on a torch without the tag.
HOST_SYNC = tuple(t for t in (getattr(torch.Tag, "cudagraph_unsafe", None),) if t is not None)
