"""ROIAlign with maskrcnn-benchmark's legacy semantics (``aligned=False``) on torchvision's kernel.

Legacy ROIAlign does not subtract the half-pixel offset and clamps ROI sizes to at least one pixel; this is
torchvision's ``aligned=False`` mode, bit for bit. MLPerf's reference accuracy depends on it, so we never use
``aligned=True`` here.
"""
import torch
from torch import nn
from torchvision.ops import roi_align as _tv_roi_align


def roi_align(input, rois, output_size, spatial_scale, sampling_ratio):
    """``rois`` is ``(K, 5)``: batch index, x1, y1, x2, y2 in input-image coordinates."""
    if isinstance(output_size, int):
        output_size = (output_size, output_size)
    # Half precision runs in fp32, like the reference's @amp.float_function: fp16/bf16 ROI coordinates would
    # round to whole pixels.
    compute = torch.float32 if input.dtype in (torch.float16, torch.bfloat16) else input.dtype
    out = _tv_roi_align(input.to(compute), rois.to(compute), output_size, spatial_scale, sampling_ratio,
                        aligned=False)
    return out.to(input.dtype)


class ROIAlign(nn.Module):
    def __init__(self, output_size, spatial_scale, sampling_ratio):
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale
        self.sampling_ratio = sampling_ratio

    def forward(self, input, rois):
        return roi_align(input, rois, self.output_size, self.spatial_scale, self.sampling_ratio)

    def extra_repr(self):
        return f"output_size={self.output_size}, spatial_scale={self.spatial_scale}, " \
               f"sampling_ratio={self.sampling_ratio}, aligned=False"
