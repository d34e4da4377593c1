"""What torch needs, beyond the C++ kernels, to treat the compiled op and its magnitude form as
first-class ops:
fake kernels (shapes for torch.compile and meta tensors), autograd, and an autocast policy.

Autocast policy: under torch.autocast the op runs in float32 (inputs are cast up, output is
float32). The op is memory-bound, so half storage would save little, while the magnitude of
small differences and its reciprocal in backward lose accuracy in half; the next layer casts
back down as autocast decides. Half and bfloat16 tensors passed outside autocast run natively
with float accumulation.
"""

from __future__ import annotations

import torch

from .checks import check_edge_backward_inputs, check_edge_inputs, check_edge_x, check_magnitude_backward_inputs

_registered = False


def _fake_edge_enhance(x: torch.Tensor, alpha: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    check_edge_inputs(x, alpha, eps)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _fake_edge_enhance_backward(
    grad_y: torch.Tensor, x: torch.Tensor, alpha: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    check_edge_backward_inputs(grad_y, x, alpha, eps)
    return torch.empty_like(x, memory_format=torch.contiguous_format), torch.empty_like(alpha)


def _fake_edge_magnitude(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    check_edge_x(x, eps, "edge_magnitude")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _fake_edge_magnitude_backward(grad_m: torch.Tensor, x: torch.Tensor, eps: float) -> torch.Tensor:
    check_magnitude_backward_inputs(grad_m, x, eps)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _setup_context(ctx, inputs, output) -> None:
    x, alpha, eps = inputs
    ctx.save_for_backward(x, alpha)  # backward recomputes everything else from x
    ctx.eps = eps


def _backward(ctx, grad_y: torch.Tensor):
    x, alpha = ctx.saved_tensors
    grad_x, grad_alpha = torch.ops.segnet_ops.edge_enhance_backward(grad_y.contiguous(), x, alpha, ctx.eps)
    return grad_x, grad_alpha, None


def _setup_magnitude_context(ctx, inputs, output) -> None:
    x, eps = inputs
    ctx.save_for_backward(x)
    ctx.eps = eps


def _magnitude_backward(ctx, grad_m: torch.Tensor):
    (x,) = ctx.saved_tensors
    return torch.ops.segnet_ops.edge_magnitude_backward(grad_m.contiguous(), x, ctx.eps), None


def _refuse_double_backward(op: str):
    def refuse(ctx, *grads):
        raise RuntimeError(
            f"{op}: double backward through the fused op (cpp/cuda backends) is not supported; "
            "use backend='python' when you need higher-order gradients"
        )

    return refuse


def register_python_parts() -> None:
    """Register once, after the CPU library (which defines the schemas) has been loaded."""
    global _registered
    if _registered:
        return
    torch.library.register_fake("segnet_ops::edge_enhance", _fake_edge_enhance)
    torch.library.register_fake("segnet_ops::edge_enhance_backward", _fake_edge_enhance_backward)
    torch.library.register_autograd("segnet_ops::edge_enhance", _backward, setup_context=_setup_context)
    torch.library.register_autograd("segnet_ops::edge_enhance_backward", _refuse_double_backward("edge_enhance"))
    torch.library.register_fake("segnet_ops::edge_magnitude", _fake_edge_magnitude)
    torch.library.register_fake("segnet_ops::edge_magnitude_backward", _fake_edge_magnitude_backward)
    torch.library.register_autograd("segnet_ops::edge_magnitude", _magnitude_backward,
                                    setup_context=_setup_magnitude_context)
    torch.library.register_autograd("segnet_ops::edge_magnitude_backward", _refuse_double_backward("edge_magnitude"))
    for device_type in ("cpu", "cuda"):
        for op in ("edge_enhance", "edge_magnitude"):
            torch.library.register_autocast(f"segnet_ops::{op}", device_type, torch.float32)
    _registered = True
