"""The fused C++ backend against the python reference, and its registration with torch."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import ops
from helpers.op import (
    SHAPES,
    SHAPES_2D,
    SHAPES_3D,
    assert_matches,
    random_inputs,
    reference_with_grads,
    relative_error,
    shape_id,
)

pytestmark = pytest.mark.usefixtures("cpu_library")


def cpp_with_grads(x, alpha, grad_y, eps=1e-6):
    xc = x.detach().clone().requires_grad_()
    ac = alpha.detach().clone().requires_grad_()
    y = ops.edge_enhance(xc, ac, eps, backend="cpp")
    grad_x, grad_alpha = torch.autograd.grad(y, (xc, ac), grad_y)
    return y.detach(), grad_x, grad_alpha


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_matches_reference_in_float64(shape):
    x, alpha, grad_y = random_inputs(shape)
    assert_matches(cpp_with_grads(x, alpha, grad_y), reference_with_grads(x, alpha, grad_y), 1e-10)


@pytest.mark.parametrize("shape", [(2, 4, 33, 17), (1, 3, 9, 10, 11)], ids=shape_id)
def test_float32_agrees_with_float64(shape):
    x, alpha, grad_y = random_inputs(shape)
    expected = cpp_with_grads(x, alpha, grad_y)
    got = cpp_with_grads(x.float(), alpha.float(), grad_y.float())
    assert_matches(got, expected, 1e-5, dtype=torch.float32)


@pytest.fixture
def threads():
    """Sets torch's intra-op thread count for one test, then restores it."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


# Fewer volumes than threads: each volume is cut into slab ranges (at least 8 slabs each) that
# the threads share, including ranges of uneven length and a last range of the outer axis.
@pytest.mark.parametrize("shape", [(1, 1, 37, 13), (1, 1, 29, 7, 9), (2, 1, 17, 5, 6)], ids=shape_id)
@pytest.mark.parametrize("count", [3, 4])
def test_slab_ranges_across_threads_match_reference(shape, count, threads):
    x, alpha, grad_y = random_inputs(shape)
    threads(count)
    assert_matches(cpp_with_grads(x, alpha, grad_y), reference_with_grads(x, alpha, grad_y), 1e-10)


def long_rows_of_small_terms(dtype, width=2**18):
    """Inputs whose grad_alpha sums many small terms per row: x repeats 0, 0, 1, 1 along one row
    (m = 0.5 but at the row's two ends) and grad_y lies in [0.1, 0.15], so each term grad_y * m
    is about 0.06 and a channel's total about 16000, representable in float16 and bfloat16. The CPU
    kernel sums a row in 16 running sums of width / 16 = 16384 terms each, which float
    accumulation adds up to about 1000; a float16 running sum stops growing near 128-256, where
    half of its ulp exceeds a term, and a bfloat16 one near 16-32."""
    shape = (1, 2, 1, width)
    x = torch.tensor([0.0, 0.0, 1.0, 1.0], dtype=torch.float64).repeat(width // 4).expand(shape).contiguous()
    grad_y = torch.empty(shape, dtype=torch.float64).uniform_(0.1, 0.15, generator=torch.Generator().manual_seed(0))
    alpha = torch.tensor([0.5, -0.25], dtype=torch.float64)
    return x.to(dtype), alpha.to(dtype), grad_y.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_types_run_with_float_accumulation(dtype):
    x, alpha, grad_y = random_inputs((2, 3, 12, 13))
    expected = reference_with_grads(x, alpha, grad_y)
    got = cpp_with_grads(x.to(dtype), alpha.to(dtype), grad_y.to(dtype))
    tolerance = 1e-2 if dtype == torch.float16 else 5e-2
    assert_matches(got, expected, tolerance, dtype=dtype)
    # grad_alpha of a long row, against the float64 reference of the same (half-precision) inputs:
    # float accumulation is off by the rounding of the total to `dtype` alone (at most half its
    # eps, relative); half-precision running sums lose most of the row (relative error 0.75 in
    # float16, 0.97 in bfloat16).
    x, alpha, grad_y = long_rows_of_small_terms(dtype)
    expected = reference_with_grads(x.double(), alpha.double(), grad_y.double())[2]
    _, grad_alpha = torch.ops.segnet_ops.edge_enhance_backward(grad_y, x, alpha, 1e-6)
    assert grad_alpha.dtype == dtype
    assert relative_error(grad_alpha, expected) <= torch.finfo(dtype).eps


@pytest.mark.parametrize("shape", [(2, 2, 5, 4), (1, 2, 3, 1, 4), (1, 1, 1, 3)], ids=shape_id)
def test_gradcheck(shape):
    x, alpha, _ = random_inputs(shape)
    x.requires_grad_()
    alpha.requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: ops.edge_enhance(a, b, backend="cpp"), (x, alpha))


@pytest.mark.parametrize("shape", [SHAPES_2D[0], SHAPES_3D[0], (0, 3, 4, 5)], ids=shape_id)
@pytest.mark.parametrize("requires_grad", [True, False], ids=["grad", "no_grad"])
def test_opcheck(shape, requires_grad):
    x, alpha, _ = random_inputs(shape)
    torch.library.opcheck(
        torch.ops.segnet_ops.edge_enhance.default,
        (x.requires_grad_(requires_grad), alpha.requires_grad_(requires_grad), 1e-6),
    )


def test_opcheck_backward_op():
    x, alpha, grad_y = random_inputs((2, 3, 6, 7))
    torch.library.opcheck(torch.ops.segnet_ops.edge_enhance_backward.default, (grad_y, x, alpha, 1e-6))


@pytest.mark.parametrize(
    "layout",
    ["transposed", "sliced", "channels_last", "channels_last_3d"],
)
def test_non_contiguous_inputs_give_the_contiguous_result(layout):
    if layout == "transposed":
        x = torch.randn(2, 3, 9, 7, dtype=torch.float64).transpose(2, 3)
    elif layout == "sliced":
        x = torch.randn(2, 6, 9, 14, dtype=torch.float64)[:, ::2, :, 1::2]
    elif layout == "channels_last":
        x = torch.randn(2, 3, 9, 7, dtype=torch.float64).to(memory_format=torch.channels_last)
    else:
        x = torch.randn(2, 3, 4, 9, 7, dtype=torch.float64).to(memory_format=torch.channels_last_3d)
    assert not x.is_contiguous()
    alpha = torch.randn(3, dtype=torch.float64)
    grad_y = torch.randn(x.shape, dtype=torch.float64).transpose(-1, -2).contiguous().transpose(-1, -2)
    got = cpp_with_grads(x, alpha, grad_y)
    expected = reference_with_grads(x.contiguous(), alpha, grad_y.contiguous())
    assert got[0].is_contiguous()
    assert_matches(got, expected, 1e-10)


@pytest.mark.parametrize("shape", [(0, 3, 4, 5), (0, 2, 3, 4, 5), (2, 3, 0, 5)], ids=shape_id)
def test_empty_inputs_return_empty(shape):
    x, alpha, grad_y = random_inputs(shape)
    y, grad_x, grad_alpha = cpp_with_grads(x, alpha, grad_y)
    assert y.shape == shape and grad_x.shape == shape
    assert torch.equal(grad_alpha, torch.zeros_like(alpha))


BAD_INPUTS = [
    (lambda: (torch.randn(3, 4, 5), torch.randn(3)), r"x must have shape \(N, C, H, W\) or \(N, C, D, H, W\)"),
    (lambda: (torch.randn(1, 2, 3, 4, 5, 6), torch.randn(2)), r"got 6 dimensions"),
    (lambda: (torch.ones(1, 2, 3, 4, dtype=torch.int64), torch.ones(2, dtype=torch.int64)), r"x must be a floating"),
    (lambda: (torch.randn(1, 2, 3, 4), torch.randn(3)), r"alpha must have shape \(C,\) = \(2,\)"),
    (lambda: (torch.randn(1, 2, 3, 4), torch.randn(2, 1)), r"alpha must have shape \(C,\)"),
    (lambda: (torch.randn(1, 2, 3, 4), torch.randn(2, dtype=torch.float64)), r"alpha must have the dtype of x"),
]


@pytest.mark.parametrize("backend", ["python", "cpp"])
@pytest.mark.parametrize("make,message", BAD_INPUTS)
def test_bad_inputs_raise_a_clear_error(backend, make, message):
    x, alpha = make()
    with pytest.raises((RuntimeError, ValueError), match=message):
        ops.edge_enhance(x, alpha, backend=backend)


@pytest.mark.parametrize("eps", [0.0, -1e-6, float("nan"), float("inf")], ids=str)
def test_eps_must_be_positive_and_finite(eps):
    """Every entry point: 0 or less, NaN or inf would give inf / NaN gradients on flat regions."""
    x, alpha, grad_y = random_inputs((1, 2, 3, 4))
    message = r"eps must be a positive finite number, got .*; the default is 1e-6"
    for backend in ("python", "cpp"):
        with pytest.raises((RuntimeError, ValueError), match=message):
            ops.edge_enhance(x, alpha, eps, backend=backend)
    for op in (torch.ops.segnet_ops.edge_enhance_backward, torch.ops.segnet_ops._emulated_cuda_edge_enhance_backward):
        with pytest.raises(RuntimeError, match=message):
            op(grad_y, x, alpha, eps)
    with pytest.raises(ValueError, match=message):
        ops.EdgeEnhance(2, eps=eps)


@pytest.mark.parametrize("grad_y", [torch.randn(1, 2, 3, 5, dtype=torch.float64), torch.randn(1, 2, 3, 4)],
                         ids=["shape", "dtype"])
def test_bad_grad_y_is_rejected_alike_by_the_backward_op_and_its_fake_kernel(grad_y):
    x, alpha, _ = random_inputs((1, 2, 3, 4))
    with pytest.raises(RuntimeError, match=r"edge_enhance_backward: grad_y must have the \w+ of x \(") as compiled:
        torch.ops.segnet_ops.edge_enhance_backward(grad_y, x, alpha, 1e-6)
    with FakeTensorMode() as mode, pytest.raises(ValueError) as fake:  # what torch.compile traces with
        torch.ops.segnet_ops.edge_enhance_backward(*map(mode.from_tensor, (grad_y, x, alpha)), 1e-6)
    assert str(fake.value).split("(")[0] == str(compiled.value).split("(")[0]  # worded alike up to the values


def test_unknown_backend_and_wrong_device_are_rejected():
    x, alpha, _ = random_inputs((1, 2, 3, 4))
    with pytest.raises(ValueError, match="backend must be one of python, cpp, cuda, auto; got 'triton'"):
        ops.edge_enhance(x, alpha, backend="triton")
    with pytest.raises(ValueError, match="backend='cuda' runs on cuda tensors but x is on cpu"):
        ops.edge_enhance(x, alpha, backend="cuda")


def test_auto_resolves_to_cpp_on_cpu():
    assert ops.resolve_backend("auto", torch.device("cpu")) == "cpp"


def test_backward_saves_only_x_and_alpha():
    x, alpha, _ = random_inputs((2, 3, 8, 9))
    x.requires_grad_()
    alpha.requires_grad_()
    ops.edge_enhance(x, alpha, backend="cpp")  # the first call per dtype checks the kernel, with tensors of its own
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        ops.edge_enhance(x, alpha, backend="cpp")
    assert len(saved) == 2
    assert {t.data_ptr() for t in saved} == {x.data_ptr(), alpha.data_ptr()}


def test_double_backward_raises_a_clear_error():
    x, alpha, _ = random_inputs((1, 2, 5, 5))
    x.requires_grad_()
    alpha.requires_grad_()
    y = ops.edge_enhance(x, alpha, backend="cpp")
    (grad_x,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward through the fused op"):
        grad_x.sum().backward()


def test_backward_is_deterministic():
    x, alpha, grad_y = random_inputs((4, 3, 33, 40), dtype=torch.float32)
    first = torch.ops.segnet_ops.edge_enhance_backward(grad_y, x, alpha, 1e-6)
    second = torch.ops.segnet_ops.edge_enhance_backward(grad_y, x, alpha, 1e-6)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


def test_autocast_runs_the_op_in_float32():
    x = torch.randn(1, 2, 6, 6, dtype=torch.bfloat16)
    alpha = torch.randn(2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = ops.edge_enhance(x, alpha, backend="cpp")
    assert y.dtype == torch.float32
    expected = ops.edge_enhance_reference(x.float(), alpha)
    assert relative_error(y, expected) <= 1e-6


@pytest.mark.parametrize("shape", [(2, 3, 9, 10), (1, 2, 4, 5, 6)], ids=shape_id)
def test_compiled_module_has_no_graph_break_and_same_results(shape):
    torch._dynamo.reset()
    module = ops.EdgeEnhance(shape[1], backend="cpp", alpha_init=0.3)
    compiled = torch.compile(module, fullgraph=True)
    x, _, grad_y = random_inputs(shape, dtype=torch.float32)
    results = []
    for fn in (module, compiled):
        xi = x.clone().requires_grad_()
        y = fn(xi)
        y.backward(grad_y)
        results.append((y.detach(), xi.grad, module.alpha.grad.clone()))
        module.alpha.grad = None
    for eager, comp in zip(*results, strict=True):
        assert torch.allclose(eager, comp, rtol=1e-6, atol=1e-6)


def test_module_state_dict_round_trip():
    module = ops.EdgeEnhance(4, backend="cpp", alpha_init=0.25)
    with torch.no_grad():
        module.alpha.copy_(torch.tensor([0.1, -0.2, 0.3, 0.4]))
    restored = ops.EdgeEnhance(4, backend="python")
    restored.load_state_dict(module.state_dict())
    assert torch.equal(restored.alpha, module.alpha)
    x = torch.randn(2, 4, 6, 7)
    assert torch.allclose(restored(x), module(x), atol=1e-6)
    assert list(module.state_dict()) == ["alpha"]


def test_module_rejects_bad_arguments():
    with pytest.raises(ValueError, match="backend must be one of"):
        ops.EdgeEnhance(3, backend="fast")
    with pytest.raises(ValueError, match="channels must be a positive integer"):
        ops.EdgeEnhance(0)
