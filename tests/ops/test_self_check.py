"""The compiled op's first-use self-check (ops.self_check): the CPU library passes it in every
dtype and dimensionality; a planted wrong kernel is caught, an explicit backend stops with the
device, dtype and error named, and auto falls back to the python reference with a warning."""

from __future__ import annotations

import pytest
import torch

import ops
from ops import functional, self_check

pytestmark = pytest.mark.usefixtures("cpu_library")
CPU = torch.device("cpu")


@pytest.fixture
def fresh(monkeypatch):
    """No check remembered from other tests: every case is checked again here."""
    monkeypatch.setattr(self_check, "_found", {})
    monkeypatch.setattr(functional, "_fell_back", set())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("dims", [4, 5])
def test_the_cpu_library_passes_its_self_check(fresh, dtype, dims):
    assert self_check.problem(CPU, dtype, dims) is None


@pytest.fixture
def planted(fresh, monkeypatch):
    """A compiled edge_enhance one percent off, where the self-check reads its kernels."""
    real = self_check.compiled

    def compiled(name):
        kernel = real(name)
        return (lambda x, alpha, eps: kernel(x, alpha, eps) * 1.01) if name == "edge_enhance" else kernel

    monkeypatch.setattr(self_check, "compiled", compiled)


def test_a_wrong_kernel_stops_an_explicit_backend_naming_the_device_dtype_and_error(planted):
    x, alpha = torch.randn(1, 3, 6, 6), torch.ones(3)
    with pytest.raises(self_check.SelfCheckError, match=r"on the CPU .* in float32, 2D: edge_enhance off by 1\.\d+e-02 "
                                                        r"\(allowed 1e-04\).*op.backend=python"):
        ops.edge_enhance(x, alpha, backend="cpp")
    assert self_check.problem(CPU, torch.float64, 4) is not None  # each dtype is checked on its own


def test_a_wrong_kernel_makes_auto_fall_back_to_the_reference_with_a_warning(planted):
    x, alpha = torch.randn(1, 3, 6, 6), torch.ones(3)
    with pytest.warns(UserWarning, match=r"falls back to python: the compiled edge op gives other numbers"):
        y = ops.edge_enhance(x, alpha, backend="auto")
    assert torch.equal(y, ops.edge_enhance_reference(x, alpha))
    assert ops.edge_magnitude(x, backend="auto").shape == x.shape  # the same fallback, without a second warning


def test_the_check_runs_under_no_grad_and_inference_mode(fresh):
    with torch.inference_mode():
        y = ops.edge_enhance(torch.randn(1, 2, 5, 5), torch.ones(2), backend="cpp")
    assert y.shape == (1, 2, 5, 5) and self_check._found[(str(CPU), torch.float32, 4)] is None
