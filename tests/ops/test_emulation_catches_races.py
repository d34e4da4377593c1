"""The host emulation fails when a barrier of the 3D backward kernel is missing (an emulation that
ran every lane to the end of each phase would pass with or without barriers).

For each of the two __syncthreads of the 3D backward march (after the rows' u are shared, and
after they are read), a copy of ops/ and csrc/ has that one barrier deleted, builds its own CPU
library in its own cache and runs the emulated backward pass on a volume of several row units:
the result must differ from the python reference. The checkout's unchanged march must match it,
so that the difference is the barrier's doing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from helpers import ROOT

pytestmark = pytest.mark.slow

BARRIER = "      group.barrier();\n"
CHECK = textwrap.dedent("""
    import torch, ops
    from ops import library
    from ops.reference import edge_enhance_reference
    library.load("cpu")
    g = torch.Generator().manual_seed(0)
    shape = (1, 2, 9, 37, 24)  # 3 units of 14 rows along the middle axis
    x, gy = torch.randn(shape, generator=g, dtype=torch.float64), torch.randn(shape, generator=g, dtype=torch.float64)
    alpha = torch.randn(2, generator=g, dtype=torch.float64)
    grad_x, grad_alpha = torch.ops.segnet_ops._emulated_cuda_edge_enhance_backward(gy, x, alpha, 1e-6)
    xr, ar = x.clone().requires_grad_(), alpha.clone().requires_grad_()
    expected = torch.autograd.grad(edge_enhance_reference(xr, ar), (xr, ar), gy)
    same = torch.allclose(grad_x, expected[0], rtol=1e-9, atol=1e-9) and torch.allclose(grad_alpha, expected[1])
    print("matches" if same else "differs")
""")


def emulated_backward(folder, env) -> str:
    """'matches' or 'differs': the emulated backward pass of the op in `folder`."""
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=600)
    if done.returncode != 0:  # the emulation may also stop the launch: warps left a barrier unmatched
        assert "host emulation" in done.stderr, done.stderr[-3000:]
        return "differs"
    return done.stdout.split()[-1]


def without_barrier(tmp_path, removed: int) -> str:
    """emulated_backward of a copy with barrier `removed` (0 or 1, in source order) deleted from
    csrc/march/backward.h, built in a cache of its own."""
    copy = tmp_path / f"copy-{removed}"
    for folder in ("ops", "csrc"):
        shutil.copytree(ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    march = copy / "csrc" / "march" / "backward.h"
    source = march.read_text()
    assert source.count(BARRIER) == 2, "the 3D backward march no longer has its two barriers where this test looks"
    at = source.index(BARRIER) if removed == 0 else source.rindex(BARRIER)
    march.write_text(source[:at] + source[at + len(BARRIER):])
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "SEGNET_OPS_CACHE": str(copy / "cache"),
           "PYTHONPATH": str(copy)}
    return emulated_backward(copy, env)


def test_the_unchanged_march_matches():
    # The checkout's own library, built once for the whole run: the copies below differ from it by
    # one barrier alone.
    assert emulated_backward(ROOT, dict(os.environ)) == "matches"


@pytest.mark.parametrize("removed", [0, 1], ids=["after-share", "after-read"])
def test_a_missing_barrier_changes_the_emulated_result(tmp_path, removed):
    assert without_barrier(tmp_path, removed) == "differs"
