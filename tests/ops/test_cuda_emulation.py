"""The CUDA kernels' march (csrc/march/), emulated unit by unit on the host with every lane of a
unit in lockstep (shuffles and barriers emulated exactly), against the python reference: this is
how the GPU code's strips, halos, borders, spans, segments and two-pass grad_alpha reduction are
checked on machines without a GPU."""

from __future__ import annotations

import pytest
import torch

from helpers.op import (
    SHAPES,
    STRIP_SHAPES,
    as_stored,
    assert_matches,
    random_inputs,
    reference_with_grads,
    relative_error,
    shape_id,
    unaligned,
)

pytestmark = pytest.mark.usefixtures("cpu_library")

# Several segments along the outer axis (8 planes or more each), several 3D row units (14 rows
# each for whole vectors, 6 in the general form), rows that are not whole strips.
MULTI_TILE = [(2, 3, 20, 70), (1, 2, 9, 17, 70), (3, 1, 5, 9, 33), (1, 2, 9, 31, 24)]
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
@pytest.mark.parametrize("shape", SHAPES + STRIP_SHAPES, ids=shape_id)
def test_emulated_kernels_match_reference_in_each_dtype(shape, dtype):
    x, alpha, grad_y = random_inputs(shape)
    expected = reference_with_grads(*as_stored(dtype, x, alpha, grad_y))
    got = emulated(x.to(dtype), alpha.to(dtype), grad_y.to(dtype))
    assert_matches(got, expected, TOLERANCE[dtype], dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("shape", [(2, 2, 9, 16), (1, 2, 5, 7, 24)], ids=shape_id)
def test_emulated_kernels_on_unaligned_data_take_the_sample_path(shape, dtype):
    x, alpha, grad_y = random_inputs(shape)
    xs, gs = unaligned(x.to(dtype)), unaligned(grad_y.to(dtype))
    assert xs.data_ptr() % 16 != 0 and xs.is_contiguous()
    got = emulated(xs, alpha.to(dtype), gs)
    assert_matches(got, reference_with_grads(*as_stored(dtype, x, alpha, grad_y)), TOLERANCE[dtype], dtype=dtype)


@pytest.mark.parametrize("shape", MULTI_TILE, ids=shape_id)
def test_emulated_kernels_in_float32(shape):
    x, alpha, grad_y = random_inputs(shape)
    expected = reference_with_grads(x, alpha, grad_y)
    got = emulated(x.float(), alpha.float(), grad_y.float())
    assert_matches(got, expected, 1e-5, dtype=torch.float32)


def edge_rows_then_flat_rows(dtype):
    """Inputs on which a half-precision running sum of grad_alpha drops terms in the march.

    The march sums grad_alpha in a hierarchy: each lane over its strip (8 samples of a 16-bit
    type in 2D) and the outer positions of its segment (8 here, kMinSegment), then a warp
    butterfly, then per channel a fixed strided and tree sum of the warp partials. Equal terms
    cannot make such sums stall at a test's size; what does is a lane's running sum that meets
    large terms first and then many small ones (an edge, then flat samples). x rises by 1 per
    sample along each row (exact in float16 and bfloat16 up to 256, so m = 1 inside the row),
    grad_y is 1 on every 8th row (the first row of every segment) and 3.6 eps of the dtype on the
    others: below half an ulp of a lane's sum after its first row, so a half-precision lane sum
    drops the 7 rows that follow (about 2% of the total in float16, 16% in bfloat16), while a
    float one keeps them."""
    shape = (1, 2, 64, 256)
    x = torch.arange(shape[-1], dtype=torch.float64).expand(shape).contiguous()
    grad_y = torch.full(shape, 3.6 * torch.finfo(dtype).eps, dtype=torch.float64)
    grad_y[..., ::8, :] = 1.0
    alpha = torch.tensor([0.5, -0.25], dtype=torch.float64)
    return x.to(dtype), alpha.to(dtype), grad_y.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_emulated_kernels_in_half_types_accumulate_in_float(dtype):
    x, alpha, grad_y = random_inputs((2, 2, 12, 40))
    expected = reference_with_grads(x, alpha, grad_y)
    got = emulated(x.to(dtype), alpha.to(dtype), grad_y.to(dtype))
    assert_matches(got, expected, (1e-2 if dtype == torch.float16 else 5e-2), dtype=dtype)
    # grad_alpha against the float64 reference of the same (half-precision) inputs: float
    # accumulation is off by the rounding of the total to `dtype` alone (at most half its eps,
    # relative); half-precision lane sums miss it by 20 times that or more.
    x, alpha, grad_y = edge_rows_then_flat_rows(dtype)
    expected = reference_with_grads(x.double(), alpha.double(), grad_y.double())[2]
    _, grad_alpha = torch.ops.segnet_ops._emulated_cuda_edge_enhance_backward(grad_y, x, alpha, 1e-6)
    assert grad_alpha.dtype == dtype
    assert relative_error(grad_alpha, expected) <= torch.finfo(dtype).eps


@pytest.mark.parametrize("shape", [(1, 2, 6, 40), (1, 2, 4, 6, 24)], ids=shape_id)
def test_emulated_kernels_stay_finite_with_a_subnormal_eps(shape):
    """The device's square roots flush a subnormal argument to 0 (device_math.h, emulated here):
    on a flat region s = N^2 eps, and with eps = 1e-44 that is subnormal in float32, so
    1 / sqrt(s) would be inf and grad_x NaN where the reference is finite (g = 0 there). The
    march floors N^2 eps at the smallest normal float."""
    x = torch.full(shape, 0.5, dtype=torch.float32)
    x[..., 0] = 1.0  # one edge, the rest flat
    _, alpha, grad_y = random_inputs(shape, dtype=torch.float32)
    expected = reference_with_grads(x.double(), alpha.double(), grad_y.double(), eps=1e-44)
    got = emulated(x, alpha, grad_y, eps=1e-44)
    assert all(torch.isfinite(t).all() for t in got)
    assert_matches(got, expected, 1e-5, dtype=torch.float32)


def test_emulated_kernels_agree_with_the_cpu_kernels_in_float32():
    x, alpha, grad_y = random_inputs((2, 4, 19, 45), dtype=torch.float32)
    cpu_y = torch.ops.segnet_ops.edge_enhance(x, alpha, 1e-6)
    cpu_grads = torch.ops.segnet_ops.edge_enhance_backward(grad_y, x, alpha, 1e-6)
    assert_matches(emulated(x, alpha, grad_y), (cpu_y, *cpu_grads), 1e-5)


@pytest.fixture
def threads():
    """Sets torch's intra-op thread count for one test, then restores it."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


# 2D: 324 units of one warp; 3D backward: 84 units of 8 warps that share memory.
@pytest.mark.parametrize("shape", [(4, 3, 65, 260), (2, 3, 9, 40, 70)], ids=shape_id)
def test_emulated_grad_alpha_is_reproducible(shape, threads):
    """On the GPU the blocks of the backward march finish in any order; grad_alpha must not
    depend on it (docs/edge-op.md: partial sums added in a fixed order, no float atomics). The
    emulation has no switch to reorder its units, but it spreads them over torch's intra-op
    threads (at::parallel_for): with one thread they run in launch order, with more they run in
    chunks that interleave differently from call to call. So grad_alpha must be bitwise the same
    for every thread count and every call; adding each unit's partials to a per-channel sum in the
    order units finish (what atomicAdd does) changes its last bits. This checks the order of
    completion as far as host threads vary it, not a GPU scheduler's order."""
    x, alpha, grad_y = random_inputs(shape, dtype=torch.float32)
    threads(1)
    first = emulated(x, alpha, grad_y)[2]
    for count in (2, 3, 4):
        threads(count)
        assert torch.get_num_threads() == count
        for _ in range(3):
            assert torch.equal(emulated(x, alpha, grad_y)[2], first)
    expected = reference_with_grads(x.double(), alpha.double(), grad_y.double())[2]
    assert relative_error(first, expected) <= 1e-5


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("shape", [(2, 3, 20, 64), (1, 2, 9, 31, 24), (1, 2, 9, 17, 70)], ids=shape_id)
def test_the_kernels_of_a_gpu_without_cp_async_match_reference(monkeypatch, shape, dtype):
    """Compute capability 7.5 (a T4): the whole-vector strips are staged by plain loads, whose
    data is in shared memory when the load returns (csrc/march/strip.h), and a block gets 64 KB
    of shared memory, so the float32 and float64 3D backward pass runs the general form."""
    monkeypatch.setenv("SEGNET_EMULATED_ARCH", "7.5")
    x, alpha, grad_y = random_inputs(shape)
    expected = reference_with_grads(*as_stored(dtype, x, alpha, grad_y))
    got = emulated(x.to(dtype), alpha.to(dtype), grad_y.to(dtype))
    assert_matches(got, expected, TOLERANCE[dtype], dtype=dtype)


def test_an_architecture_the_emulation_does_not_know_is_refused(monkeypatch):
    monkeypatch.setenv("SEGNET_EMULATED_ARCH", "6.1")
    x, alpha, grad_y = random_inputs((1, 2, 9, 24))
    with pytest.raises(RuntimeError, match=r"SEGNET_EMULATED_ARCH=6.1 is not an architecture the emulation knows"):
        emulated(x, alpha, grad_y)


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
