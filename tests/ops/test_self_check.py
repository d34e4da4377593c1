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


@pytest.fixture
def volta_gpu(monkeypatch):
    """A visible GPU of compute capability 7.0 (a V100, older than torch's CUDA 13 builds and the
    kernels support), and no CUDA library loaded yet."""
    from ops import library

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla V100")
    monkeypatch.setattr(functional, "_compiled_ready", {"cpu"})
    monkeypatch.setattr(functional, "_unavailable", {})

    def never(*args, **kwargs):
        raise AssertionError("a CUDA library was built or loaded for a GPU it cannot run on")

    monkeypatch.setattr(library, "build_cuda_library", never)
    monkeypatch.setattr(library, "_load_shipped", lambda kind, name: never() if kind == "cuda" else None)


def test_a_gpu_older_than_the_kernels_need_is_told_before_any_build(volta_gpu):
    with pytest.raises(ops.OpsBuildError, match=r"needs compute capability 7.5 or newer and Tesla V100 is 7.0: use "
                                                r"op.backend=python"):
        ops.resolve_backend("cuda", torch.device("cuda"))
    with pytest.warns(UserWarning, match=r"backend='auto' falls back to python on cuda: .*Tesla V100 is 7.0"):
        assert ops.resolve_backend("auto", torch.device("cuda")) == "python"
