"""The host emulation fails when a barrier of the 3D backward kernel is missing (an emulation that
ran every lane to the end of each phase would pass with or without barriers).

For each `group.barrier()` of the 3D backward march (after the rows' u are shared, and after they
are read), found in csrc/march/backward.h, the emulation is told to leave that one barrier out
(SEGNET_EMULATION_SKIPS_BARRIER=backward.h:<line>: its warps go on as if the line were deleted)
and the emulated backward pass runs on a volume of several row units: the result must differ from
the python reference. The same volume with every barrier kept must match, so that the difference
is the barrier's doing."""

from __future__ import annotations

import pytest
import torch

from helpers import ROOT
from ops.reference import edge_enhance_reference

pytestmark = pytest.mark.usefixtures("cpu_library")

BARRIER = "group.barrier();"
MARCH = ROOT / "csrc" / "march" / "backward.h"


def barrier_lines() -> list[int]:
    lines = [n for n, line in enumerate(MARCH.read_text().splitlines(), start=1) if line.strip() == BARRIER]
    assert len(lines) == 2, "the 3D backward march no longer has its two barriers where this test looks"
    return lines


def emulated_backward() -> str:
    """'matches' or 'differs': the emulated backward pass against the reference, on 3 units of 14
    rows along the middle axis."""
    g = torch.Generator().manual_seed(0)
    shape = (1, 2, 9, 37, 24)
    x, gy = torch.randn(shape, generator=g, dtype=torch.float64), torch.randn(shape, generator=g, dtype=torch.float64)
    alpha = torch.randn(2, generator=g, dtype=torch.float64)
    try:
        grad_x, grad_alpha = torch.ops.segnet_ops._emulated_cuda_edge_enhance_backward(gy, x, alpha, 1e-6)
    except RuntimeError as stopped:  # the emulation may also stop the launch: warps left a barrier unmatched
        if "host emulation" not in str(stopped):
            raise
        return "differs"
    xr, ar = x.clone().requires_grad_(), alpha.clone().requires_grad_()
    expected = torch.autograd.grad(edge_enhance_reference(xr, ar), (xr, ar), gy)
    same = torch.allclose(grad_x, expected[0], rtol=1e-9, atol=1e-9) and torch.allclose(grad_alpha, expected[1])
    return "matches" if same else "differs"


def test_the_march_with_every_barrier_matches(monkeypatch):
    monkeypatch.delenv("SEGNET_EMULATION_SKIPS_BARRIER", raising=False)
    assert emulated_backward() == "matches"


@pytest.mark.parametrize("removed", [0, 1], ids=["after-share", "after-read"])
def test_a_missing_barrier_changes_the_emulated_result(monkeypatch, removed):
    monkeypatch.setenv("SEGNET_EMULATION_SKIPS_BARRIER", f"backward.h:{barrier_lines()[removed]}")
    assert emulated_backward() == "differs"


def test_a_barrier_named_wrongly_is_refused(monkeypatch):
    monkeypatch.setenv("SEGNET_EMULATION_SKIPS_BARRIER", "backward.h")
    with pytest.raises(RuntimeError, match="expected file:line"):
        emulated_backward()
