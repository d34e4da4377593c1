"""The edge-enhancement op and its magnitude form, with python, cpp and cuda backends (their
contract: docs/edge-op.md)."""

from .functional import BACKENDS, edge_enhance, edge_magnitude, load_compiled, resolve_backend
from .library import OpsBuildError
from .module import EdgeEnhance
from .reference import INDUCTOR_OPTIONS, edge_enhance_reference, edge_magnitude_reference
from .self_check import SelfCheckError

__all__ = [
    "BACKENDS",
    "EdgeEnhance",
    "INDUCTOR_OPTIONS",
    "OpsBuildError",
    "SelfCheckError",
    "edge_enhance",
    "edge_enhance_reference",
    "edge_magnitude",
    "edge_magnitude_reference",
    "load_compiled",
    "resolve_backend",
]
