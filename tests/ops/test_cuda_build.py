"""The CUDA library compiles and links here (nvcc, no GPU): `python -m ops.build --cuda`. It is the
test run's one CUDA build, into the run's empty op cache (tests/conftest.py): whichever of this
test, the kernel report and the wheel comes first compiles it, and the others load it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import ROOT
from ops.library import DEFAULT_CUDA_HOME, default_cuda_archs

NVCC = Path(os.environ.get("CUDA_HOME", DEFAULT_CUDA_HOME)) / "bin" / "nvcc"


def build(env_overrides: dict[str, str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **env_overrides}
    return subprocess.run(
        [sys.executable, "-m", "ops.build", "--cuda"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200
    )


@pytest.mark.slow
@pytest.mark.skipif(not NVCC.exists(), reason=f"nvcc not found at {NVCC}: the CUDA build cannot be checked here")
@pytest.mark.skipif(torch.version.cuda is None, reason="torch is a CPU-only build")
def test_cuda_library_compiles_and_links_for_every_default_arch_and_ptx():
    archs = default_cuda_archs(NVCC)
    assert archs.startswith("7.5;8.0;9.0;") and archs.endswith("+PTX")
    result = build({})
    assert result.returncode == 0, result.stderr[-4000:]
    library = Path(re.search(r"ready segnet_ops_cuda: (\S+)", result.stdout).group(1))
    # The fat binary keeps each cubin's ptxas options and the PTX's .target in plain text
    # (cuobjdump, which would list them, is not part of every toolkit install).
    blob = library.read_bytes()
    codes = [a.replace(".", "") for a in archs.removesuffix("+PTX").split(";")]
    for code in codes:  # T4, A100, H100/H200, and the newer ones this nvcc knows
        assert f"-arch sm_{code}".encode() in blob
    assert f".target sm_{codes[-1]}".encode() in blob  # PTX of the newest, for GPUs newer still


def test_cuda_build_without_nvcc_says_what_is_missing(tmp_path):
    result = build({"CUDA_HOME": str(tmp_path / "no-cuda")})
    assert result.returncode == 1
    assert f"nvcc not found at {tmp_path / 'no-cuda' / 'bin' / 'nvcc'}" in result.stderr
    assert "op.backend=cpp" in result.stderr


def test_cuda_backend_without_gpu_is_refused_with_a_reason():
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    from ops.library import OpsBuildError, load

    with pytest.raises(OpsBuildError, match="needs a visible GPU"):
        load("cuda")
