"""Mask inference: paste the M x M mask probabilities of the detections into their images."""
import torch
import torch.nn.functional as F


def expand_boxes(boxes, scale):
    w_half = (boxes[:, 2] - boxes[:, 0]) * 0.5 * scale
    h_half = (boxes[:, 3] - boxes[:, 1]) * 0.5 * scale
    x_c = (boxes[:, 2] + boxes[:, 0]) * 0.5
    y_c = (boxes[:, 3] + boxes[:, 1]) * 0.5
    return torch.stack((x_c - w_half, y_c - h_half, x_c + w_half, y_c + h_half), dim=1)


class Masker:
    """Pastes ``M x M`` mask probabilities into the image, all detections at once.

    Reference semantics: pad the mask by one pixel, expand the box by ``(M + 2) / M``, round it to integers,
    resize the padded mask bilinearly to the box's "+1" size, and threshold at 0.5. Implemented with one
    ``grid_sample`` per chunk of detections instead of a Python loop per box.
    """

    def __init__(self, threshold=0.5, padding=1, max_elements=1 << 27):
        self.threshold = threshold
        self.padding = padding
        self.max_elements = max_elements

    def paste(self, masks, boxes, height, width):
        """``masks`` ``(D, 1, M, M)`` probabilities, ``boxes`` ``(D, 4)`` -> ``(D, 1, H, W)`` bool."""
        d = masks.shape[0]
        if d == 0:
            return masks.new_zeros((0, 1, height, width), dtype=torch.bool)
        m = masks.shape[-1]
        padded = F.pad(masks.float(), (self.padding,) * 4)
        scale = (m + 2 * self.padding) / m
        boxes = expand_boxes(boxes.float(), scale).trunc()  # the reference casts to int32 (truncation)
        x0, y0, x1, y1 = boxes.unbind(1)
        bw = (x1 - x0 + 1).clamp(min=1)
        bh = (y1 - y0 + 1).clamp(min=1)
        out = []
        chunk = max(1, self.max_elements // (height * width))
        xs = torch.arange(width, device=masks.device, dtype=torch.float32)
        ys = torch.arange(height, device=masks.device, dtype=torch.float32)
        for s in range(0, d, chunk):
            sl = slice(s, s + chunk)
            gx = ((xs[None, :] - x0[sl, None]) + 0.5) / bw[sl, None] * 2 - 1  # (c, W)
            gy = ((ys[None, :] - y0[sl, None]) + 0.5) / bh[sl, None] * 2 - 1  # (c, H)
            inside_x = (xs[None, :] >= x0[sl, None]) & (xs[None, :] <= x1[sl, None])
            inside_y = (ys[None, :] >= y0[sl, None]) & (ys[None, :] <= y1[sl, None])
            grid = torch.stack((gx[:, None, :].expand(-1, height, -1), gy[:, :, None].expand(-1, -1, width)), -1)
            sampled = F.grid_sample(padded[sl], grid, mode="bilinear", padding_mode="border", align_corners=False)
            inside = (inside_y[:, :, None] & inside_x[:, None, :])[:, None]
            out.append((sampled > self.threshold) & inside)
        return torch.cat(out)

    def __call__(self, masks, boxlists):
        """Paste the ``"mask"`` field of each BoxList (resized to its image) into its image size."""
        return [self.paste(m, b.convert("xyxy").bbox, b.size[1], b.size[0]) for m, b in zip(masks, boxlists)]
