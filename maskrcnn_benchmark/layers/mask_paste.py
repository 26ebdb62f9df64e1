"""Pasting ``M x M`` mask probabilities into image coordinates: the one implementation (the model's Masker and
the COCO post-processing both call it).

Reference geometry (maskrcnn-benchmark ``Masker``): pad the mask by one pixel, expand its box by ``(M + 2) / M``
around the centre, truncate the box to integers (the reference casts to int32), resize the padded mask
bilinearly to the box's "+1" size (``interpolate(align_corners=False)``) and threshold it. Instead of a Python loop
per box, every detection is sampled with one ``grid_sample`` per chunk of detections of similar window size.
"""
import torch
import torch.nn.functional as F


def expand_boxes(boxes, scale):
    """Scale ``(N, 4)`` xyxy boxes about their centres (the reference's ``expand_boxes``)."""
    w_half = (boxes[:, 2] - boxes[:, 0]) * 0.5 * scale
    h_half = (boxes[:, 3] - boxes[:, 1]) * 0.5 * scale
    x_c = (boxes[:, 2] + boxes[:, 0]) * 0.5
    y_c = (boxes[:, 3] + boxes[:, 1]) * 0.5
    return torch.stack((x_c - w_half, y_c - h_half, x_c + w_half, y_c + h_half), dim=1)


def _expanded_int_boxes(boxes, m, padding):
    scale = (m + 2 * padding) / m
    return expand_boxes(boxes.float(), scale).trunc()  # the reference casts to int32 (truncation)


def paste_mask_windows(probs, boxes, height, width, threshold=0.5, padding=1, window="box", max_elements=1 << 24):
    """Pasted masks of D detections, each only in a window: ``(masks, x0, y0)``.

    ``masks`` is ``(D, h, w)`` bool (the windows padded to the largest; outside a window it is False), window d
    starts at image pixel ``(x0[d], y0[d])``. ``window="box"``: the expanded box clipped to the image;
    ``"full"``: the whole image. Detections are processed in chunks of similar window size (``max_elements``).
    """
    device = probs.device
    d = probs.shape[0]
    m = probs.shape[-1]
    padded = F.pad(probs.float().reshape(d, 1, m, m), (padding,) * 4)
    box = _expanded_int_boxes(boxes, m, padding)
    bx0, by0, bx1, by1 = box.unbind(1)
    bw = (bx1 - bx0 + 1).clamp(min=1)
    bh = (by1 - by0 + 1).clamp(min=1)
    if window == "box":
        x0, y0 = bx0.clamp(min=0), by0.clamp(min=0)
        x1, y1 = bx1.clamp(max=width - 1), by1.clamp(max=height - 1)
    elif window == "full":
        x0, y0 = torch.zeros_like(bx0), torch.zeros_like(by0)
        x1, y1 = torch.full_like(bx1, width - 1), torch.full_like(by1, height - 1)
    else:
        raise ValueError(f"window must be 'box' or 'full', got {window!r}")
    ww = (x1 - x0 + 1).clamp(min=0)
    wh = (y1 - y0 + 1).clamp(min=0)
    if d == 0:
        return torch.zeros((0, 0, 0), dtype=torch.bool, device=device), x0.long(), y0.long()
    # One read back (the window sizes, for chunking on the host) and one copy of their order to the device.
    sizes = torch.stack((wh, ww), 1).long().cpu()
    order = torch.argsort(sizes[:, 0] * sizes[:, 1])
    order_on_device = order.to(device)
    heights, widths = (v.tolist() for v in sizes[order].unbind(1))  # the chunking below reads Python ints
    out = torch.zeros((d, max(heights), max(widths)), dtype=torch.bool, device=device)
    start = 0
    while start < d:
        end = start + 1
        h_max, w_max = heights[start], widths[start]
        while end < d:
            h_next = max(h_max, heights[end])
            w_next = max(w_max, widths[end])
            if (end - start + 1) * max(h_next, 1) * max(w_next, 1) > max_elements:
                break
            h_max, w_max, end = h_next, w_next, end + 1
        idx = order_on_device[start:end]
        start = end
        if h_max == 0 or w_max == 0:
            continue
        cols = torch.arange(w_max, device=device, dtype=torch.float32)
        rows = torch.arange(h_max, device=device, dtype=torch.float32)
        # Image pixel (x, y) of window pixel (c, r); its position in the box's resize grid, as grid_sample wants:
        # interpolate(size=(bh, bw), align_corners=False) samples the padded mask at (i + 0.5) * (M+2)/bw - 0.5.
        x = x0[idx, None] + cols[None, :]
        y = y0[idx, None] + rows[None, :]
        gx = ((x - bx0[idx, None]) + 0.5) / bw[idx, None] * 2 - 1
        gy = ((y - by0[idx, None]) + 0.5) / bh[idx, None] * 2 - 1
        grid = torch.stack((gx[:, None, :].expand(-1, h_max, -1), gy[:, :, None].expand(-1, -1, w_max)), -1)
        sampled = F.grid_sample(padded[idx], grid, mode="bilinear", padding_mode="border", align_corners=False)
        inside = (cols[None, :] < ww[idx, None]) & (x >= bx0[idx, None]) & (x <= bx1[idx, None])
        inside_y = (rows[None, :] < wh[idx, None]) & (y >= by0[idx, None]) & (y <= by1[idx, None])
        mask = (sampled[:, 0] > threshold) & inside_y[:, :, None] & inside[:, None, :]
        out[idx, :h_max, :w_max] = mask
    return out, x0.long(), y0.long()


def paste_masks_in_image(probs, boxes, height, width, threshold=0.5, padding=1):
    """``(D, 1, M, M)`` or ``(D, M, M)`` probabilities -> ``(D, 1, height, width)`` bool image masks."""
    d = probs.shape[0]
    out = torch.zeros((d, 1, int(height), int(width)), dtype=torch.bool, device=probs.device)
    if d == 0:
        return out
    windows, _, _ = paste_mask_windows(probs, boxes, int(height), int(width), threshold, padding, window="full")
    out[:, 0, : windows.shape[1], : windows.shape[2]] = windows
    return out
