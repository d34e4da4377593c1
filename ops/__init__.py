"""The edge-enhancement op with python, cpp and cuda backends (its contract: docs/edge-op.md)."""

from .functional import BACKENDS, edge_enhance, resolve_backend
from .functional import load_compiled as load_library
from .library import OpsBuildError
from .module import EdgeEnhance
from .reference import INDUCTOR_OPTIONS, edge_enhance_reference, edge_magnitude

__all__ = [
    "BACKENDS",
    "EdgeEnhance",
    "INDUCTOR_OPTIONS",
    "OpsBuildError",
    "edge_enhance",
    "edge_enhance_reference",
    "edge_magnitude",
    "load_library",
    "resolve_backend",
]
