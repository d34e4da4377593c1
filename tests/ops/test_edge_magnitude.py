"""The op's magnitude form, m = |Sobel x| (ops.edge_magnitude), in every backend against the
python reference: the fused C++ kernels, the CUDA kernels' march emulated on the host, and the
CUDA kernels themselves where a GPU is visible."""

from __future__ import annotations

import math

import pytest
import torch

import ops
from helpers.op import SHAPES, SHAPES_2D, SHAPES_3D, STRIP_SHAPES, relative_error, shape_id, unaligned

pytestmark = pytest.mark.usefixtures("cpu_library")

TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 5e-2}


def inputs(shape, dtype=torch.float64, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, dtype=torch.float64, generator=generator)
    grad_m = torch.randn(shape, dtype=torch.float64, generator=generator)
    return x.to(dtype), grad_m.to(dtype)


def reference(x, grad_m, eps=1e-6):
    """m and grad_x of the python reference, by autograd, in float64."""
    xr = x.detach().double().requires_grad_()
    m = ops.edge_magnitude_reference(xr, eps)
    (grad_x,) = torch.autograd.grad(m, xr, grad_m.double())
    return m.detach(), grad_x


def fused(x, grad_m, eps=1e-6, backend="cpp"):
    """m and grad_x of a compiled backend, through its autograd."""
    device = "cuda" if backend == "cuda" else "cpu"
    xc = x.detach().to(device).requires_grad_()
    m = ops.edge_magnitude(xc, eps, backend=backend)
    (grad_x,) = torch.autograd.grad(m, xc, grad_m.to(device))
    return m.detach().cpu(), grad_x.cpu()


def emulated(x, grad_m, eps=1e-6):
    """m and grad_x of the CUDA kernels' march, run on the host."""
    m = torch.ops.segnet_ops._emulated_cuda_edge_magnitude(x, eps)
    return m, torch.ops.segnet_ops._emulated_cuda_edge_magnitude_backward(grad_m, x, eps)


def assert_close(got, expected, tolerance, dtype=None):
    """m and grad_x within `tolerance` of the reference, relative to its largest value or 1 where
    that is smaller (grad_x vanishes on a volume of one sample: its reference is rounding only)."""
    for g, e in zip(got, expected, strict=True):
        if dtype is not None:
            assert g.dtype == dtype
        if e.numel():
            assert (g.double() - e).abs().max() <= tolerance * max(e.abs().max().item(), 1.0)


def test_a_ramp_has_unit_magnitude_inside_and_half_at_the_clamped_border():
    x = torch.arange(6, dtype=torch.float64).repeat(1, 1, 5, 1)  # x = column index
    eps = 1e-6
    for m in (ops.edge_magnitude_reference(x, eps), ops.edge_magnitude(x, eps, backend="cpp")):
        assert torch.allclose(m[..., 1:-1], torch.full_like(m[..., 1:-1], math.sqrt(1.0 + eps)))
        # clamped: (4 * 1 - 4 * 0) / 8 = 0.5 at either end of the row
        assert torch.allclose(m[..., [0, -1]], torch.full_like(m[..., [0, -1]], math.sqrt(0.25 + eps)))


@pytest.mark.parametrize("shape", [SHAPES_2D[0], SHAPES_3D[0]], ids=shape_id)
def test_the_magnitude_is_the_op_s_output_less_x_at_unit_gains(shape):
    x, _ = inputs(shape)
    enhanced = ops.edge_enhance_reference(x, torch.ones(shape[1], dtype=x.dtype))
    assert torch.allclose(ops.edge_magnitude(x, backend="cpp"), enhanced - x, rtol=0, atol=1e-12)


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_cpp_matches_reference_in_float64(shape):
    x, grad_m = inputs(shape)
    assert_close(fused(x, grad_m), reference(x, grad_m), 1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_cpp_in_lower_precision_accumulates_in_float(dtype):
    x, grad_m = inputs((2, 3, 17, 33))
    assert_close(fused(x.to(dtype), grad_m.to(dtype)), reference(x, grad_m), TOLERANCE[dtype], dtype=dtype)


@pytest.mark.parametrize("shape", SHAPES + STRIP_SHAPES, ids=shape_id)
def test_emulated_cuda_march_matches_reference_in_float64(shape):
    x, grad_m = inputs(shape)
    assert_close(emulated(x, grad_m), reference(x, grad_m), 1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(2, 1, 17, 136), (1, 2, 5, 7, 24)], ids=shape_id)
def test_emulated_cuda_march_in_lower_precision(shape, dtype):
    x, grad_m = inputs(shape)
    assert_close(emulated(x.to(dtype), grad_m.to(dtype)), reference(x, grad_m), TOLERANCE[dtype], dtype=dtype)


@pytest.mark.parametrize("shape", [(2, 2, 9, 16), (1, 2, 5, 7, 24)], ids=shape_id)
def test_emulated_cuda_march_on_unaligned_data(shape):
    x, grad_m = inputs(shape, dtype=torch.float32)
    xs, gs = unaligned(x), unaligned(grad_m)
    assert xs.data_ptr() % 16 != 0
    assert_close(emulated(xs, gs), reference(x, grad_m), TOLERANCE[torch.float32])


@pytest.mark.parametrize("shape", [(2, 2, 5, 4), (1, 2, 3, 1, 4), (1, 1, 1, 3)], ids=shape_id)
def test_gradcheck(shape):
    x, _ = inputs(shape)
    x.requires_grad_()
    assert torch.autograd.gradcheck(lambda a: ops.edge_magnitude(a, backend="cpp"), (x,))


@pytest.mark.parametrize("shape", [SHAPES_2D[0], SHAPES_3D[0], (0, 3, 4, 5)], ids=shape_id)
@pytest.mark.parametrize("requires_grad", [True, False], ids=["grad", "no_grad"])
def test_opcheck(shape, requires_grad):
    x, _ = inputs(shape)
    torch.library.opcheck(torch.ops.segnet_ops.edge_magnitude.default, (x.requires_grad_(requires_grad), 1e-6))


def test_opcheck_backward_op():
    x, grad_m = inputs((2, 3, 6, 7))
    torch.library.opcheck(torch.ops.segnet_ops.edge_magnitude_backward.default, (grad_m, x, 1e-6))


@pytest.mark.parametrize("layout", ["transposed", "sliced", "channels_last_3d"])
def test_non_contiguous_inputs_give_the_contiguous_result(layout):
    if layout == "transposed":
        x = torch.randn(2, 3, 9, 7, dtype=torch.float64).transpose(2, 3)
    elif layout == "sliced":
        x = torch.randn(2, 6, 9, 14, dtype=torch.float64)[:, ::2, :, 1::2]
    else:
        x = torch.randn(2, 3, 4, 9, 7, dtype=torch.float64).to(memory_format=torch.channels_last_3d)
    assert not x.is_contiguous()
    grad_m = torch.randn(x.shape, dtype=torch.float64)
    got = fused(x, grad_m)
    assert got[0].is_contiguous()
    assert_close(got, reference(x.contiguous(), grad_m), 1e-10)


@pytest.mark.parametrize("shape", [(0, 3, 4, 5), (0, 2, 3, 4, 5), (2, 3, 0, 5)], ids=shape_id)
def test_empty_inputs_return_empty(shape):
    x, grad_m = inputs(shape)
    for m, grad_x in (fused(x, grad_m), emulated(x, grad_m), reference(x, grad_m)):
        assert m.shape == shape and grad_x.shape == shape


BAD_INPUTS = [
    (lambda: torch.randn(3, 4, 5), r"^edge_magnitude: x must have shape \(N, C, H, W\) or \(N, C, D, H, W\)"),
    (lambda: torch.ones(1, 2, 3, 4, dtype=torch.int64), r"^edge_magnitude: x must be a floating tensor"),
]


@pytest.mark.parametrize("backend", ["python", "cpp"])
@pytest.mark.parametrize("make,message", BAD_INPUTS)
def test_bad_inputs_raise_a_clear_error_that_names_the_form(backend, make, message):
    with pytest.raises((ValueError, RuntimeError), match=message):
        ops.edge_magnitude(make(), backend=backend)


@pytest.mark.parametrize("backend", ["python", "cpp"])
def test_eps_must_be_positive_and_finite(backend):
    with pytest.raises((ValueError, RuntimeError), match=r"^edge_magnitude: eps must be a positive finite number"):
        ops.edge_magnitude(torch.randn(1, 1, 4, 4), eps=0.0, backend=backend)


def test_bad_grad_m_is_rejected_alike_by_the_backward_op_and_its_fake_kernel():
    x = torch.randn(1, 2, 3, 4)
    grad_m = torch.randn(1, 2, 3, 5)
    message = r"edge_magnitude_backward: grad_m must have the shape of x"
    with pytest.raises(RuntimeError, match=message):
        torch.ops.segnet_ops.edge_magnitude_backward(grad_m, x, 1e-6)
    with torch._subclasses.fake_tensor.FakeTensorMode() as mode, pytest.raises(ValueError, match=message):
        torch.ops.segnet_ops.edge_magnitude_backward(mode.from_tensor(grad_m), mode.from_tensor(x), 1e-6)


def test_backward_saves_only_x():
    x, _ = inputs((2, 3, 8, 9))
    x.requires_grad_()
    ops.edge_magnitude(x, backend="cpp")  # the first call per dtype checks the kernel, with tensors of its own
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        ops.edge_magnitude(x, backend="cpp")
    assert [t.data_ptr() for t in saved] == [x.data_ptr()]


def test_double_backward_raises_a_clear_error():
    x, _ = inputs((1, 2, 5, 5))
    x.requires_grad_()
    (grad_x,) = torch.autograd.grad(ops.edge_magnitude(x, backend="cpp").sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="edge_magnitude: double backward through the fused op"):
        grad_x.sum().backward()


def test_autocast_runs_the_magnitude_in_float32():
    x = torch.randn(1, 2, 6, 6, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        m = ops.edge_magnitude(x, backend="cpp")
    assert m.dtype == torch.float32
    assert relative_error(m, ops.edge_magnitude_reference(x.float())) <= 1e-6


@pytest.mark.parametrize("shape", [(2, 3, 9, 10), (1, 2, 4, 5, 6)], ids=shape_id)
def test_compiled_loss_through_the_magnitude_has_no_graph_break_and_same_results(shape):
    torch._dynamo.reset()
    x, target = inputs(shape, dtype=torch.float32)

    def loss(z):
        return (ops.edge_magnitude(torch.sigmoid(z), backend="cpp") - target.abs()).abs().mean()

    results = []
    for fn in (loss, torch.compile(loss, fullgraph=True)):
        xi = x.clone().requires_grad_()
        value = fn(xi)
        value.backward()
        results.append((value.detach(), xi.grad))
    for eager, compiled in zip(*results, strict=True):
        assert torch.allclose(eager, compiled, rtol=1e-6, atol=1e-7)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
@pytest.mark.parametrize("shape", SHAPES + STRIP_SHAPES + [(2, 4, 19, 33, 41)], ids=shape_id)
def test_cuda_matches_reference(shape, dtype):
    x, grad_m = inputs(shape)
    got = fused(x.to(dtype), grad_m.to(dtype), backend="cuda")
    assert_close(got, reference(x, grad_m), TOLERANCE[dtype], dtype=dtype)


@pytest.mark.cuda
def test_cuda_gradcheck_and_opcheck():
    x, _ = inputs((1, 2, 3, 4, 5))
    x = x.cuda().requires_grad_()
    assert torch.autograd.gradcheck(lambda a: ops.edge_magnitude(a, backend="cuda"), (x,))
    torch.library.opcheck(torch.ops.segnet_ops.edge_magnitude.default, (x, 1e-6))
