"""Sharp U-Net's skip filter (Zunair and Hamza, 2021), the edge layer's closest published relative
and the baseline it must beat: a fixed depthwise sharpening kernel on every skip connection, with
no parameters to learn.

The kernel is -1 around a centre of 3^d (9 in 2D, 27 in 3D): its taps sum to 1, so a flat region
passes unchanged and a step is steepened. Borders are padded by replication, for the same reason.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def sharpening_kernel(spatial_dims: int) -> torch.Tensor:
    kernel = -torch.ones((3,) * spatial_dims)
    kernel[(1,) * spatial_dims] = 3**spatial_dims
    return kernel


class FixedSharpening(nn.Module):
    def __init__(self, channels: int, spatial_dims: int):
        super().__init__()
        kernel = sharpening_kernel(spatial_dims)
        # A buffer: saved with the weights (an export carries it) but never trained.
        self.register_buffer("weight", kernel.expand(channels, 1, *kernel.shape).clone())
        self.convolve = F.conv2d if spatial_dims == 2 else F.conv3d

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        padded = F.pad(x, [1] * (2 * (x.dim() - 2)), mode="replicate")
        return self.convolve(padded, self.weight.to(x.dtype), groups=x.shape[1])
