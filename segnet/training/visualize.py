"""Images for TensorBoard: input, edge magnitude, prediction and label overlays side by side."""

from __future__ import annotations

import torch

import ops

# Background, then one colour per class (repeats for many classes).
PALETTE = torch.tensor(
    [[0, 0, 0], [230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200], [245, 130, 48], [145, 30, 180]],
    dtype=torch.float32,
) / 255


def _normalize(image: torch.Tensor) -> torch.Tensor:
    low, high = image.min(), image.max()
    return (image - low) / (high - low) if high > low else torch.zeros_like(image)


def _overlay(gray: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    colors = PALETTE[1:][(labels.clamp_min(1) - 1) % (len(PALETTE) - 1)].permute(2, 0, 1)
    rgb = gray.expand(3, -1, -1).clone()
    mask = (labels > 0).expand(3, -1, -1)
    rgb[mask] = 0.5 * rgb[mask] + 0.5 * colors[mask]
    return rgb


def middle_slice(volume: torch.Tensor) -> torch.Tensor:
    """(C, H, W) from (C, H, W) or the middle slice of the last axis of (C, H, W, D)."""
    return volume if volume.dim() == 3 else volume[..., volume.shape[-1] // 2]


def validation_panel(image: torch.Tensor, prediction: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """(3, H, 4W) panel of one sample: image (C, *spatial), prediction and label (1, *spatial)."""
    image = image.detach().float().cpu()
    edges = ops.edge_magnitude_reference(image[None], eps=1e-6)[0]
    gray = _normalize(middle_slice(image)[:1])
    edge = _normalize(middle_slice(edges)[:1])
    pred = middle_slice(prediction.detach().cpu())[0]
    ref = middle_slice(label.detach().cpu())[0]
    return torch.cat([gray.expand(3, -1, -1), edge.expand(3, -1, -1), _overlay(gray, pred), _overlay(gray, ref)], dim=2)
