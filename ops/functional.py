"""ops.edge_enhance() and its magnitude form ops.edge_magnitude(): backend resolution and dispatch."""

from __future__ import annotations

import warnings

import torch

from . import library, self_check
from .reference import edge_enhance_reference, edge_magnitude_reference
from .registration import register_python_parts

BACKENDS = ("python", "cpp", "cuda", "auto")

# Device types whose compiled library is loaded, and the reason the compiled op is unavailable
# (auto then falls back to python). Plain module state so torch.compile can trace the checks.
_compiled_ready: set[str] = set()
_unavailable: dict[str, str] = {}
_fell_back: set[tuple[str, torch.dtype, int]] = set()  # where auto warned that the self-check failed


def check_backend_name(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"edge_enhance: backend must be one of {', '.join(BACKENDS)}; got {backend!r}")


def load_compiled(device_type: str) -> None:
    """Load (building it if need be) the compiled op for a device type, and its autograd and
    fake-tensor parts; raises library.OpsBuildError."""
    if device_type in _compiled_ready:
        return
    library.load("cuda" if device_type == "cuda" else "cpu")
    register_python_parts()
    _compiled_ready.add(device_type)


def compiled_available(device_type: str) -> bool:
    """Whether auto can use the compiled op on this device type; warns once when it cannot."""
    if device_type in _compiled_ready:
        return True
    if device_type not in ("cpu", "cuda") or device_type in _unavailable:
        return False
    try:
        load_compiled(device_type)
        return True
    except library.OpsBuildError as error:
        _unavailable[device_type] = str(error)
        warnings.warn(f"edge_enhance: backend='auto' falls back to python on {device_type}: {error}", stacklevel=3)
        return False


def resolve_backend(backend: str, device: torch.device) -> str:
    """The backend that will run for tensors on `device`: python, cpp or cuda."""
    check_backend_name(backend)
    if backend == "python":
        return "python"
    if backend == "auto":
        if not compiled_available(device.type):
            return "python"
        return "cuda" if device.type == "cuda" else "cpp"
    wanted = "cpu" if backend == "cpp" else "cuda"
    if device.type != wanted:
        other = "cuda" if backend == "cpp" else "cpp"
        raise ValueError(
            f"edge_enhance: backend={backend!r} runs on {wanted} tensors but x is on {device}; "
            f"use backend={other!r} or backend='auto'"
        )
    load_compiled(wanted)
    return backend


def checked_backend(backend: str, x: torch.Tensor) -> str:
    """The backend that runs for x: resolve_backend's, with the compiled op's first-use self-check
    for x's device, dtype and dimensionality (ops.self_check) passed, or auto's fallback."""
    resolved = resolve_backend(backend, x.device)
    if resolved == "python" or torch.compiler.is_compiling() or x.dim() not in (4, 5) or not x.is_floating_point():
        return resolved  # (the kernel's own checks answer a wrong x)
    # under autocast the op runs in float32 (ops.registration's policy): that kernel is the one to check
    dtype = torch.float32 if torch.is_autocast_enabled(x.device.type) else x.dtype
    problem = self_check.problem(x.device, dtype, x.dim())
    if problem is None:
        return resolved
    if backend != "auto":
        raise self_check.SelfCheckError(f"{problem}. Train with op.backend=python (the reference), and report the "
                                        "GPU and this message")
    if (x.device.type, dtype, x.dim()) not in _fell_back:
        _fell_back.add((x.device.type, dtype, x.dim()))
        warnings.warn(f"edge_enhance: backend='auto' falls back to python: {problem}", stacklevel=3)
    return "python"


def edge_enhance(x: torch.Tensor, alpha: torch.Tensor, eps: float = 1e-6, backend: str = "auto") -> torch.Tensor:
    """y = x + alpha[c] * sqrt(sum_d (K_d * x)^2 + eps), normalized Sobel K_d, replicate borders."""
    if checked_backend(backend, x) == "python":
        return edge_enhance_reference(x, alpha, eps)
    return torch.ops.segnet_ops.edge_enhance(x, alpha, eps)


def edge_magnitude(x: torch.Tensor, eps: float = 1e-6, backend: str = "auto") -> torch.Tensor:
    """m = sqrt(sum_d (K_d * x)^2 + eps): the op's magnitude form, without x and the gain."""
    if checked_backend(backend, x) == "python":
        return edge_magnitude_reference(x, eps)
    return torch.ops.segnet_ops.edge_magnitude(x, eps)
