"""The CUDA kernels' march (csrc/march/), emulated unit by unit on the host with every lane of a
unit in lockstep (shuffles and barriers emulated exactly), against the python reference: this is
how the GPU code's strips, halos, borders, spans, segments and two-pass grad_alpha reduction are
checked on machines without a GPU."""

from __future__ import annotations

import pytest
import torch

from helpers.op import SHAPES, STRIP_SHAPES, assert_matches, random_inputs, reference_with_grads, shape_id, unaligned

pytestmark = pytest.mark.usefixtures("cpu_library")

# Several segments along the outer axis (8 planes or more each), several 3D row units (6 rows
# each), rows that are not whole strips.
MULTI_TILE = [(2, 3, 20, 70), (1, 2, 9, 17, 70), (3, 1, 5, 9, 33)]
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 5e-2}


def emulated(x, alpha, grad_y, eps=1e-6):
    y = torch.ops.segnet_ops._emulated_cuda_edge_enhance(x, alpha, eps)
    grad_x, grad_alpha = torch.ops.segnet_ops._emulated_cuda_edge_enhance_backward(grad_y, x, alpha, eps)
    return y, grad_x, grad_alpha


@pytest.mark.parametrize("shape", SHAPES + MULTI_TILE, ids=shape_id)
def test_emulated_kernels_match_reference_in_float64(shape):
    x, alpha, grad_y = random_inputs(shape)
    assert_matches(emulated(x, alpha, grad_y), reference_with_grads(x, alpha, grad_y), 1e-10)


@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
@pytest.mark.parametrize("shape", STRIP_SHAPES, ids=shape_id)
def test_emulated_strips_match_reference(shape, dtype):
    x, alpha, grad_y = random_inputs(shape)
    expected = reference_with_grads(x, alpha, grad_y)
    got = emulated(x.to(dtype), alpha.to(dtype), grad_y.to(dtype))
    assert_matches(got, expected, TOLERANCE[dtype], dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("shape", [(2, 2, 9, 16), (1, 2, 5, 7, 24)], ids=shape_id)
def test_emulated_kernels_on_unaligned_data_take_the_sample_path(shape, dtype):
    x, alpha, grad_y = random_inputs(shape)
    xs, gs = unaligned(x.to(dtype)), unaligned(grad_y.to(dtype))
    assert xs.data_ptr() % 16 != 0 and xs.is_contiguous()
    got = emulated(xs, alpha.to(dtype), gs)
    assert_matches(got, reference_with_grads(x, alpha, grad_y), TOLERANCE[dtype], dtype=dtype)


@pytest.mark.parametrize("shape", MULTI_TILE, ids=shape_id)
def test_emulated_kernels_in_float32(shape):
    x, alpha, grad_y = random_inputs(shape)
    expected = reference_with_grads(x, alpha, grad_y)
    got = emulated(x.float(), alpha.float(), grad_y.float())
    assert_matches(got, expected, 1e-5, dtype=torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_emulated_kernels_in_half_types_accumulate_in_float(dtype):
    x, alpha, grad_y = random_inputs((2, 2, 12, 40))
    expected = reference_with_grads(x, alpha, grad_y)
    got = emulated(x.to(dtype), alpha.to(dtype), grad_y.to(dtype))
    assert_matches(got, expected, (1e-2 if dtype == torch.float16 else 5e-2), dtype=dtype)


def test_emulated_kernels_agree_with_the_cpu_kernels_in_float32():
    x, alpha, grad_y = random_inputs((2, 4, 19, 45), dtype=torch.float32)
    cpu_y = torch.ops.segnet_ops.edge_enhance(x, alpha, 1e-6)
    cpu_grads = torch.ops.segnet_ops.edge_enhance_backward(grad_y, x, alpha, 1e-6)
    assert_matches(emulated(x, alpha, grad_y), (cpu_y, *cpu_grads), 1e-5)


def test_emulated_grad_alpha_is_reproducible():
    x, alpha, grad_y = random_inputs((4, 3, 33, 65), dtype=torch.float32)
    first = emulated(x, alpha, grad_y)[2]
    second = emulated(x, alpha, grad_y)[2]
    assert torch.equal(first, second)


@pytest.mark.parametrize("shape", [(0, 3, 8, 8), (0, 2, 4, 4, 4)], ids=shape_id)
def test_emulated_kernels_on_empty_batches(shape):
    x, alpha, grad_y = random_inputs(shape)
    y, grad_x, grad_alpha = emulated(x, alpha, grad_y)
    assert y.shape == shape and grad_x.shape == shape
    assert torch.equal(grad_alpha, torch.zeros_like(alpha))


def test_emulated_kernels_check_their_inputs():
    x, alpha, _ = random_inputs((1, 2, 4, 4))
    with pytest.raises(RuntimeError, match=r"alpha must have shape \(C,\) = \(2,\)"):
        torch.ops.segnet_ops._emulated_cuda_edge_enhance(x, alpha[:1], 1e-6)
