"""The CUDA backend on a GPU (skipped, with the reason, where none is visible)."""

from __future__ import annotations

import pytest
import torch

import ops
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

pytestmark = pytest.mark.cuda

TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 5e-2}


def cuda_with_grads(x, alpha, grad_y):
    xc = x.detach().cuda().requires_grad_()
    ac = alpha.detach().cuda().requires_grad_()
    y = ops.edge_enhance(xc, ac, backend="cuda")
    grad_x, grad_alpha = torch.autograd.grad(y, (xc, ac), grad_y.cuda())
    return y.detach().cpu(), grad_x.cpu(), grad_alpha.cpu()


@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
@pytest.mark.parametrize("shape", SHAPES + STRIP_SHAPES + [(4, 8, 67, 129), (2, 4, 19, 33, 41)], ids=shape_id)
def test_cuda_matches_reference(shape, dtype):
    x, alpha, grad_y = random_inputs(shape)
    expected = reference_with_grads(*as_stored(dtype, x, alpha, grad_y))
    got = cuda_with_grads(x.to(dtype), alpha.to(dtype), grad_y.to(dtype))
    assert_matches(got, expected, TOLERANCE[dtype], dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("shape", [(2, 2, 9, 16), (1, 2, 5, 7, 24)], ids=shape_id)
def test_cuda_on_unaligned_data(shape, dtype):
    x, alpha, grad_y = random_inputs(shape)
    xs, gs = unaligned(x.to(dtype).cuda()), unaligned(grad_y.to(dtype).cuda())
    assert xs.data_ptr() % 16 != 0
    ops.resolve_backend("cuda", torch.device("cuda"))
    got = (torch.ops.segnet_ops.edge_enhance(xs, alpha.to(dtype).cuda(), 1e-6),
           *torch.ops.segnet_ops.edge_enhance_backward(gs, xs, alpha.to(dtype).cuda(), 1e-6))
    expected = reference_with_grads(*as_stored(dtype, x, alpha, grad_y))
    assert_matches([g.cpu() for g in got], expected, TOLERANCE[dtype], dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_cuda_agrees_with_the_cpu_kernels(dtype):
    x, alpha, grad_y = random_inputs((3, 5, 45, 70), dtype=dtype)
    cpu = (
        torch.ops.segnet_ops.edge_enhance(x, alpha, 1e-6),
        *torch.ops.segnet_ops.edge_enhance_backward(grad_y, x, alpha, 1e-6),
    )
    ops.resolve_backend("cuda", torch.device("cuda"))
    gpu = (
        torch.ops.segnet_ops.edge_enhance(x.cuda(), alpha.cuda(), 1e-6),
        *torch.ops.segnet_ops.edge_enhance_backward(grad_y.cuda(), x.cuda(), alpha.cuda(), 1e-6),
    )
    assert_matches([g.cpu() for g in gpu], cpu, TOLERANCE[dtype])


def test_cuda_gradcheck():
    x, alpha, _ = random_inputs((2, 2, 9, 37), device="cuda")
    assert torch.autograd.gradcheck(
        lambda a, b: ops.edge_enhance(a, b, backend="cuda"), (x.requires_grad_(), alpha.requires_grad_())
    )


@pytest.mark.parametrize("requires_grad", [True, False], ids=["grad", "no_grad"])
def test_cuda_opcheck(requires_grad):
    ops.resolve_backend("cuda", torch.device("cuda"))
    for shape in [(2, 3, 17, 40), (1, 2, 5, 9, 33)]:
        x, alpha, _ = random_inputs(shape, device="cuda")
        torch.library.opcheck(
            torch.ops.segnet_ops.edge_enhance.default,
            (x.requires_grad_(requires_grad), alpha.requires_grad_(requires_grad), 1e-6),
        )


def test_cuda_grad_alpha_is_reproducible():
    x, alpha, grad_y = random_inputs((8, 16, 128, 128), dtype=torch.float32, device="cuda")
    ops.resolve_backend("cuda", torch.device("cuda"))
    first = torch.ops.segnet_ops.edge_enhance_backward(grad_y, x, alpha, 1e-6)[1]
    second = torch.ops.segnet_ops.edge_enhance_backward(grad_y, x, alpha, 1e-6)[1]
    assert torch.equal(first, second)


def test_cuda_compiled_module_matches_eager():
    torch._dynamo.reset()
    module = ops.EdgeEnhance(4, backend="cuda", alpha_init=0.3).cuda()
    compiled = torch.compile(module, fullgraph=True)
    x = torch.randn(2, 4, 33, 65, device="cuda")
    assert torch.allclose(compiled(x), module(x), rtol=1e-5, atol=1e-5)


def test_cuda_autocast_runs_in_float32():
    x = torch.randn(2, 3, 16, 16, device="cuda", dtype=torch.float16)
    alpha = torch.randn(3, device="cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        y = ops.edge_enhance(x, alpha, backend="cuda")
    assert y.dtype == torch.float32
    assert relative_error(y, ops.edge_enhance_reference(x.float(), alpha)) <= 1e-5


def test_cuda_rejects_mixed_devices():
    x = torch.randn(1, 2, 4, 4, device="cuda")
    with pytest.raises((RuntimeError, ValueError), match="alpha must be on the device of x"):
        ops.edge_enhance(x, torch.ones(2), backend="cuda")
