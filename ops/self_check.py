"""The compiled op's first-use self-check: before a compiled backend's first call on a device, per
process, dtype and dimensionality, the op and its magnitude form are run on a small input and
compared with the python reference in float64: the forward, grad_x and grad_alpha. A kernel that
computes something else on this machine (a GPU or compiler path no test has run) is found there,
not in a trained model. The explicit backend then stops with SelfCheckError naming the device,
its capability, the dtype and the error; backend='auto' falls back to python with a warning.

The check costs a forward and a backward of a (2, 3, 8, 9[, 7]) tensor per case, once per process
(docs/edge-op-backends.md gives its measured cost); under torch.compile's tracing it is not run.
"""

from __future__ import annotations

import platform

import torch

from .reference import edge_enhance_reference, edge_magnitude_reference

EPS = 1e-6
# The largest error allowed, relative to the reference's largest value, by the dtype the kernel
# computes in: float accumulation for the half types, whose inputs and outputs are rounded.
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}
SHAPES = {4: (2, 3, 8, 9), 5: (2, 3, 8, 9, 7)}

_found: dict[tuple[str, torch.dtype, int], str | None] = {}  # (device, dtype, x.dim()) -> the problem, or None


class SelfCheckError(RuntimeError):
    pass


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"{torch.cuda.get_device_name(device)} (sm_{major}{minor}, {device})"
    return f"the CPU ({platform.processor() or platform.machine()})"


def compiled(name: str):
    """The compiled op `name` of torch.ops.segnet_ops (a seam the tests plant a wrong kernel in)."""
    return getattr(torch.ops.segnet_ops, name)


def worst_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    """max |got - expected| over max(|expected|, 1), in float64."""
    got, expected = got.double().cpu(), expected.double().cpu()
    return float((got - expected).abs().max() / expected.abs().max().clamp_min(1.0))


def differences(device: torch.device, dtype: torch.dtype, dims: int) -> list[str]:
    """Each output of the compiled op that differs from the reference beyond TOLERANCE, in words
    (whatever grad, inference or autocast mode the first call came in)."""
    with torch.inference_mode(False), torch.enable_grad(), torch.autocast(device.type, enabled=False):
        generator = torch.Generator().manual_seed(0)
        inputs = [torch.randn(shape, dtype=torch.float64, generator=generator)
                  for shape in (SHAPES[dims], SHAPES[dims][1:2], SHAPES[dims])]
        x, alpha, grad = (t.to(device=device, dtype=dtype) for t in inputs)
        # the reference on the very inputs the kernel gets (rounded to its dtype), in float64
        rx, ralpha = (t.double().cpu().requires_grad_() for t in (x, alpha))
        expected = outputs(edge_enhance_reference(rx, ralpha, EPS), edge_magnitude_reference(rx, EPS), rx, ralpha,
                           grad.double().cpu())
        kx, kalpha = x.clone().requires_grad_(), alpha.clone().requires_grad_()
        got = outputs(compiled("edge_enhance")(kx, kalpha, EPS), compiled("edge_magnitude")(kx, EPS), kx, kalpha,
                      grad)
    tolerance = TOLERANCE.get(dtype, 1e-2)
    errors = {name: worst_error(got[name], expected[name]) for name in expected}
    return [f"{name} off by {error:.2e} (allowed {tolerance:.0e})" for name, error in errors.items()
            if not error <= tolerance]


def outputs(y: torch.Tensor, m: torch.Tensor, x: torch.Tensor, alpha: torch.Tensor,
            grad: torch.Tensor) -> dict[str, torch.Tensor]:
    """The op's forward and gradients, and its magnitude form's, for one incoming gradient."""
    grad_x, grad_alpha = torch.autograd.grad(y, (x, alpha), grad)
    (grad_m,) = torch.autograd.grad(m, x, grad)
    return {"edge_enhance": y.detach(), "grad_x": grad_x, "grad_alpha": grad_alpha, "edge_magnitude": m.detach(),
            "edge_magnitude grad_x": grad_m}


def problem(device: torch.device, dtype: torch.dtype, dims: int) -> str | None:
    """What the compiled op gets wrong for this device, dtype and dimensionality (None: nothing),
    checked the first time it is asked in this process."""
    key = (str(device), dtype, dims)
    if key not in _found:
        try:
            wrong = differences(device, dtype, dims) if dims in SHAPES else []
        except Exception as error:  # a kernel that fails outright fails its check
            wrong = [f"the check failed: {type(error).__name__}: {error}"]
        _found[key] = (f"the compiled edge op gives other numbers than the python reference on "
                       f"{device_name(device)} in {str(dtype).removeprefix('torch.')}, {dims - 2}D: "
                       f"{'; '.join(wrong)}") if wrong else None
    return _found[key]
