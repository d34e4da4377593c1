"""Argument checks of the edge op in Python, worded like the C++ ones (csrc/checks.h), for the
python backend and the fake kernels that torch.compile traces with."""

from __future__ import annotations

import math

import torch


def check_eps(eps: float, op: str = "edge_enhance") -> None:
    """eps keeps the magnitude's square root away from 0 on flat regions (docs/edge-op.md)."""
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"{op}: eps must be a positive finite number, got {eps}; the default is 1e-6")


def check_edge_x(x: torch.Tensor, eps: float, op: str) -> None:
    """What both forms ask of x and eps; `op` names the op in the message."""
    check_eps(eps, op)
    if x.dim() not in (4, 5):
        raise ValueError(
            f"{op}: x must have shape (N, C, H, W) or (N, C, D, H, W), got "
            f"{x.dim()} dimensions with shape {tuple(x.shape)}"
        )
    if not x.is_floating_point():
        raise ValueError(f"{op}: x must be a floating tensor (float32, float64, float16, bfloat16), got {x.dtype}")


def check_edge_inputs(x: torch.Tensor, alpha: torch.Tensor, eps: float) -> None:
    check_edge_x(x, eps, "edge_enhance")
    if alpha.dim() != 1 or alpha.shape[0] != x.shape[1]:
        raise ValueError(
            f"edge_enhance: alpha must have shape (C,) = ({x.shape[1]},) to match x's channels, "
            f"got {tuple(alpha.shape)}"
        )
    if alpha.dtype != x.dtype:
        raise ValueError(
            f"edge_enhance: alpha must have the dtype of x ({x.dtype}), got {alpha.dtype}; "
            "cast it with alpha.to(x.dtype)"
        )
    if alpha.device != x.device:
        raise ValueError(f"edge_enhance: alpha must be on the device of x ({x.device}), got {alpha.device}")


def check_incoming_grad(grad: torch.Tensor, x: torch.Tensor, op: str, name: str) -> None:
    """The incoming gradient `name` of the backward op `op`: x's shape, dtype and device."""
    if grad.shape != x.shape:
        raise ValueError(f"{op}: {name} must have the shape of x ({tuple(x.shape)}), got {tuple(grad.shape)}")
    if grad.dtype != x.dtype:
        raise ValueError(f"{op}: {name} must have the dtype of x ({x.dtype}), got {grad.dtype}")
    if grad.device != x.device:
        raise ValueError(f"{op}: {name} must be on the device of x ({x.device}), got {grad.device}")


def check_edge_backward_inputs(grad_y: torch.Tensor, x: torch.Tensor, alpha: torch.Tensor, eps: float) -> None:
    check_edge_inputs(x, alpha, eps)
    check_incoming_grad(grad_y, x, "edge_enhance_backward", "grad_y")


def check_magnitude_backward_inputs(grad_m: torch.Tensor, x: torch.Tensor, eps: float) -> None:
    check_edge_x(x, eps, "edge_magnitude_backward")
    check_incoming_grad(grad_m, x, "edge_magnitude_backward", "grad_m")
