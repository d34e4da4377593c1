"""The host emulation fails when a barrier of the 3D backward kernel is missing (an emulation that
ran every lane to the end of each phase would pass with or without barriers).

For each of the two __syncthreads of the 3D backward march (after the rows' u are shared, and
after they are read), a copy of csrc/ has that one barrier deleted and the emulated backward pass
runs on a volume of several row units: the result must differ from the python reference. Each
build holds only what the emulation needs (the schemas and csrc/cpu/emulation.cpp, for float64
alone), through the op's own loader (ops.library.build), not the op's CPU kernels. The same build
of the unchanged sources must match, so that the difference is the barrier's doing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import ROOT

pytestmark = pytest.mark.slow

BARRIER = "      group.barrier();\n"
# argv[1]: the csrc/ folder to build the emulation from, for float64 alone (all this check runs).
CHECK = textwrap.dedent("""
    import sys, torch
    from pathlib import Path
    from ops import library
    from ops.reference import edge_enhance_reference
    flags = (*library.jit_flags("cpu"), "-DSEGNET_EMULATE_FLOAT64_ONLY")
    library.build("segnet_ops_emulation", Path(sys.argv[1]), ("schema.cpp", "cpu/emulation.cpp"), flags,
                  extra_cflags=list(flags), extra_ldflags=["-fopenmp"])
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


def emulated_backward(csrc: Path) -> str:
    """'matches' or 'differs': the emulated backward pass built from `csrc`."""
    done = subprocess.run([sys.executable, "-c", CHECK, str(csrc)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode != 0:  # the emulation may also stop the launch: warps left a barrier unmatched
        assert "host emulation" in done.stderr, done.stderr[-3000:]
        return "differs"
    return done.stdout.split()[-1]


def without_barrier(tmp_path, removed: int) -> Path:
    """A copy of csrc/ with barrier `removed` (0 or 1, in source order) deleted from
    csrc/march/backward.h."""
    copy = tmp_path / "csrc"
    shutil.copytree(ROOT / "csrc", copy)
    march = copy / "march" / "backward.h"
    source = march.read_text()
    assert source.count(BARRIER) == 2, "the 3D backward march no longer has its two barriers where this test looks"
    at = source.index(BARRIER) if removed == 0 else source.rindex(BARRIER)
    march.write_text(source[:at] + source[at + len(BARRIER):])
    return copy


def test_the_unchanged_march_matches():
    assert emulated_backward(ROOT / "csrc") == "matches"


@pytest.mark.parametrize("removed", [0, 1], ids=["after-share", "after-read"])
def test_a_missing_barrier_changes_the_emulated_result(tmp_path, removed):
    assert emulated_backward(without_barrier(tmp_path, removed)) == "differs"
