"""EdgeEnhance: the edge op as a layer with one learnable gain per channel."""

from __future__ import annotations

import torch
from torch import nn

from .checks import check_eps
from .functional import check_backend_name, compiled_available, edge_enhance, load_compiled


class EdgeEnhance(nn.Module):
    """y = x + alpha * edge magnitude of x, for (N, C, H, W) or (N, C, D, H, W) input.

    The compiled library is built and loaded here, at construction, so that a missing compiler
    or GPU shows up before training starts and torch.compile never traces a build.
    """

    def __init__(self, channels: int, backend: str = "auto", alpha_init: float = 0.0, eps: float = 1e-6):
        super().__init__()
        if channels < 1:
            raise ValueError(f"EdgeEnhance: channels must be a positive integer, got {channels}")
        check_backend_name(backend)
        check_eps(eps)
        self.backend = backend
        self.eps = float(eps)
        self.alpha = nn.Parameter(torch.full((channels,), float(alpha_init)))
        if backend == "cpp":
            load_compiled("cpu")
        elif backend == "cuda":
            load_compiled("cuda")
        elif backend == "auto":
            compiled_available("cpu")
            if torch.cuda.is_available():
                compiled_available("cuda")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return edge_enhance(x, self.alpha, self.eps, self.backend)

    def extra_repr(self) -> str:
        return f"channels={self.alpha.numel()}, backend={self.backend!r}, eps={self.eps:g}"
