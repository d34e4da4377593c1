"""The python reference against values worked out by hand from docs/edge-op.md."""

from __future__ import annotations

import math

import pytest
import torch

import ops
from ops.reference import sobel_kernels


def test_kernels_are_normalized_sobel():
    k2 = sobel_kernels(2, torch.float64, torch.device("cpu"))
    expected_x = torch.tensor([[-1.0, 0, 1], [-2, 0, 2], [-1, 0, 1]]) / 8
    assert torch.equal(k2[1], expected_x.double())  # derivative along W
    assert torch.equal(k2[0], expected_x.T.double())  # derivative along H
    k3 = sobel_kernels(3, torch.float64, torch.device("cpu"))
    assert k3.shape == (3, 3, 3, 3)
    for d in range(3):
        assert k3[d].abs().sum().item() == pytest.approx(1.0)
    assert k3[0][2, 1, 1].item() == pytest.approx(4 / 32)  # [1,2,1] x [1,2,1] centre = 4


def test_ramp_gives_unit_gradient_inside_and_half_at_clamped_border():
    w = 6
    x = torch.arange(w, dtype=torch.float64).repeat(1, 1, 5, 1)  # x = column index
    eps = 1e-6
    m = ops.edge_magnitude_reference(x, eps)
    interior = math.sqrt(1.0 + eps)  # (4 * (j+1) - 4 * (j-1)) / 8 = 1
    border = math.sqrt(0.25 + eps)  # clamped: (4 * 1 - 4 * 0) / 8 = 0.5
    assert torch.allclose(m[..., 1:-1], torch.full_like(m[..., 1:-1], interior))
    assert torch.allclose(m[..., 0], torch.full_like(m[..., 0], border))
    assert torch.allclose(m[..., -1], torch.full_like(m[..., -1], border))


def test_constant_input_has_magnitude_sqrt_eps_and_output_shifted_by_alpha():
    x = torch.full((2, 3, 4, 5, 6), 7.0, dtype=torch.float64)
    alpha = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    y = ops.edge_enhance_reference(x, alpha, eps=1e-4)
    expected = 7.0 + alpha.view(1, 3, 1, 1, 1) * 1e-2
    assert torch.allclose(y, expected.expand_as(y))


def test_sign_of_the_step_does_not_change_the_magnitude():
    x = torch.zeros(1, 1, 8, 8, dtype=torch.float64)
    x[..., 4:] = 1.0
    assert torch.allclose(ops.edge_magnitude_reference(x), ops.edge_magnitude_reference(-x))
    assert torch.allclose(ops.edge_magnitude_reference(x), ops.edge_magnitude_reference(x.flip(-1)).flip(-1))


def test_output_is_contiguous_for_channels_last_input():
    x = torch.randn(2, 3, 5, 7).to(memory_format=torch.channels_last)
    y = ops.edge_enhance(x, torch.ones(3), backend="python")
    assert y.is_contiguous()
