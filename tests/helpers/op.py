"""Shapes, inputs and comparisons of the edge-enhancement op's tests (tests/ops/)."""

from __future__ import annotations

import torch

# Odd sizes, size-1 axes, sizes that do not divide the CUDA tiles (32 x 8 x 4), 2D and 3D.
SHAPES_2D = [(2, 3, 7, 9), (1, 2, 1, 5), (2, 1, 6, 1), (1, 1, 1, 1), (1, 2, 2, 2), (2, 2, 11, 37)]
SHAPES_3D = [(2, 3, 4, 5, 6), (1, 2, 1, 3, 1), (1, 1, 3, 1, 4), (1, 1, 1, 1, 1), (1, 2, 5, 9, 33)]
SHAPES = SHAPES_2D + SHAPES_3D
# The CUDA kernels' strips (2 samples per lane in float64, 4 in float32, 8 in 16-bit types but 4
# in their 3D backward pass): rows of whole vectors (the vector path) and not, rows shorter than a
# strip, rows longer than one warp's 32 strips (overlapping spans), outer and middle axes of 1, 2.
STRIP_SHAPES = [
    (2, 2, 2, 8),
    (1, 2, 1, 16),
    (1, 1, 19, 3),
    (2, 1, 17, 136),
    (1, 2, 9, 301),
    (1, 1, 2, 9, 16),
    (1, 2, 1, 14, 130),
    (2, 1, 20, 2, 24),
    (1, 1, 3, 1, 264),
]


def shape_id(shape) -> str:
    return "x".join(map(str, shape))


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """max |actual - expected| / max |expected| (0 for empty tensors)."""
    if expected.numel() == 0:
        return 0.0
    scale = expected.abs().max().clamp_min(torch.finfo(torch.float64).tiny)
    return ((actual.double() - expected.double()).abs().max() / scale).item()


def assert_matches(got, expected, tolerance: float, dtype: torch.dtype | None = None) -> None:
    """Each of (y, grad_x, grad_alpha) within `tolerance` relative error, of `dtype` if given."""
    for g, e in zip(got, expected, strict=True):
        if dtype is not None:
            assert g.dtype == dtype
        assert relative_error(g, e) <= tolerance


def unaligned(t: torch.Tensor) -> torch.Tensor:
    """The same values, contiguous, one element past an aligned address: no whole-vector loads."""
    view = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)[1:].view(t.shape)
    view.copy_(t)
    return view


def reference_with_grads(x: torch.Tensor, alpha: torch.Tensor, grad_y: torch.Tensor, eps: float = 1e-6):
    """y, grad_x, grad_alpha of the python reference."""
    from ops import edge_enhance_reference

    xr = x.detach().clone().requires_grad_()
    ar = alpha.detach().clone().requires_grad_()
    y = edge_enhance_reference(xr, ar, eps)
    grad_x, grad_alpha = torch.autograd.grad(y, (xr, ar), grad_y)
    return y.detach(), grad_x, grad_alpha


def as_stored(dtype: torch.dtype, *tensors: torch.Tensor) -> list[torch.Tensor]:
    """The tensors' values as `dtype` stores them, in float64: the reference of a kernel fed
    `dtype` inputs, so that a comparison measures the kernel's arithmetic, not the rounding of its
    inputs (which alone moves grad_alpha of a 6-voxel bfloat16 tensor, a sum of a few terms that
    cancel, by 18 %)."""
    return [t.to(dtype).double() for t in tensors]


def random_inputs(shape, dtype=torch.float64, seed: int = 0, device: str = "cpu"):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, dtype=dtype, generator=generator).to(device)
    alpha = torch.randn(shape[1], dtype=dtype, generator=generator).to(device)
    grad_y = torch.randn(shape, dtype=dtype, generator=generator).to(device)
    return x, alpha, grad_y
