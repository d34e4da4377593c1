"""The python backend: the readable definition of the edge op (docs/edge-op.md).

Replicate padding, a fixed depthwise convolution with the normalized Sobel kernels, then the
pointwise magnitude. Autograd of this composition defines the gradients every fused backend
must match.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .checks import check_edge_inputs, check_edge_x

# Inductor options for compiling the reference: torch 2.14's inductor, when it moves convolutions
# to channels-last (layout_optimization), asserts a wrong stride on the output of
# replication_pad2d_backward and fails in backward. Without that pass the composition compiles.
INDUCTOR_OPTIONS = {"layout_optimization": False}

SMOOTH = (1.0, 2.0, 1.0)
DERIV = (-1.0, 0.0, 1.0)


def sobel_kernels(ndim: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """K_d for d over the spatial axes, shape (ndim, 3, ...) with ndim trailing 3s."""
    kernels = []
    for d in range(ndim):
        k = torch.ones((), dtype=torch.float64)
        for axis in range(ndim):
            taps = torch.tensor(DERIV if axis == d else SMOOTH, dtype=torch.float64)
            k = torch.tensordot(k, taps, dims=0)
        kernels.append(k / k.abs().sum())
    return torch.stack(kernels).to(dtype=dtype, device=device)


def sobel_gradients(x: torch.Tensor) -> torch.Tensor:
    """g of shape (N, C, ndim, *spatial): the normalized derivatives along each spatial axis."""
    ndim = x.dim() - 2
    channels = x.shape[1]
    weight = sobel_kernels(ndim, x.dtype, x.device).unsqueeze(1).repeat(channels, 1, *([1] * ndim))
    padded = F.pad(x, [1] * (2 * ndim), mode="replicate")
    conv = F.conv2d if ndim == 2 else F.conv3d
    return conv(padded, weight, groups=channels).unflatten(1, (channels, ndim))


def magnitude(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """m = sqrt(sum_d g_d^2 + eps), shape of x."""
    return torch.sqrt(sobel_gradients(x).square().sum(dim=2) + eps)


def edge_magnitude_reference(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """The op's magnitude form, m alone, as the python backend computes it."""
    check_edge_x(x, eps, "edge_magnitude")
    if x.numel() == 0:  # replicate padding rejects empty tensors
        return (x * 0).contiguous()
    return magnitude(x, eps).contiguous()


def edge_enhance_reference(x: torch.Tensor, alpha: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    check_edge_inputs(x, alpha, eps)
    gain = alpha.view(1, -1, *([1] * (x.dim() - 2)))
    if x.numel() == 0:  # replicate padding rejects empty tensors; the result is empty anyway
        return (x + gain * torch.zeros_like(x)).contiguous()
    return (x + gain * magnitude(x, eps)).contiguous()
