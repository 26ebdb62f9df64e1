"""The polygon padding of a compiled step's batches, decided from the config alone: no torch is imported here
(``tools/preflight.py`` resolves a run's config without loading torch)."""

POLYGON_SLOTS = (16, 4)  # (vertices, parts): the least padding of a mask's polygons (DATALOADER.STATIC_POLYGON_SLOTS)
# With CUDA graphs, floors most COCO batches fit in, so most replay the graph the warm-up recorded and a batch past
# them records one more. A guess: COCO's polygon counts per mask have not been measured here.
POLYGON_SLOTS_WITH_CUDA_GRAPHS = (256, 8)
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")  # torch.compile's modes that record CUDA graphs


def polygon_slots(cfg, mode=None, device=None):
    """``DATALOADER.STATIC_POLYGON_SLOTS`` as a tuple; not set (automatic): :data:`POLYGON_SLOTS_WITH_CUDA_GRAPHS`
    for a step that records CUDA graphs (``device``, else MODEL.DEVICE, is CUDA; inductor; ``mode``, else
    ``COMPILE_MODE``, one of :data:`CUDA_GRAPH_MODES`), else :data:`POLYGON_SLOTS`."""
    slots = cfg.DATALOADER.STATIC_POLYGON_SLOTS
    if slots:
        return tuple(int(v) for v in slots)
    graphs = (str(device or cfg.MODEL.DEVICE).startswith("cuda") and cfg.COMPILE_BACKEND == "inductor"
              and (mode or cfg.COMPILE_MODE) in CUDA_GRAPH_MODES)
    return POLYGON_SLOTS_WITH_CUDA_GRAPHS if graphs else POLYGON_SLOTS
