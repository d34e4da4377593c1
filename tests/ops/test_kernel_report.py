"""The static performance report of the CUDA kernels (scripts/kernel_report.py): every
instantiation compiles for sm_90 without spills or a stack frame, and the float32 and 2D 16-bit
kernels model at least 0.8 (forward) / 0.6 (backward) of a device-to-device copy on an H200."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import ROOT
from ops.library import DEFAULT_CUDA_HOME

NVCC = Path(DEFAULT_CUDA_HOME) / "bin" / "nvcc"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "kernels.json"
    result = subprocess.run(
        [sys.executable, "scripts/kernel_report.py", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=1200,
    )
    return result, json.loads(out.read_text()) if out.exists() else []


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not NVCC.exists(), reason=f"nvcc not found at {NVCC}: the CUDA kernels cannot be compiled here"),
    pytest.mark.skipif(torch.version.cuda is None, reason="torch is a CPU-only build"),
]


def test_report_covers_every_instantiation(report):
    result, rows = report
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    kinds = {(r["ndim"], r["direction"], r["dtype"], r["loads"]) for r in rows}
    assert len(kinds) == len(rows) == 2 * 2 * 4 * 2
    assert "| 2D forward float32 |" in result.stdout and "ceiling, not a promise" in result.stdout


def test_no_instantiation_spills_or_uses_a_stack_frame(report):
    _, rows = report
    offenders = [r["kernel"] for r in rows if r["spills"] or r["stack"]]
    assert rows and not offenders, offenders


def test_float32_and_2d_half_kernels_model_near_copy_bandwidth(report):
    _, rows = report
    checked = [r for r in rows if r["checked"]]
    assert {(r["ndim"], r["direction"], r["dtype"]) for r in checked} >= {
        (2, "forward", "float32"), (3, "forward", "float32"), (2, "backward", "float32"), (3, "backward", "float32"),
        (2, "forward", "float16"), (2, "backward", "bfloat16"),
    }
    for r in checked:
        floor = 0.8 if r["direction"] == "forward" else 0.6
        assert r["modeled_fraction"] >= floor, (r["kernel"], r["instructions_per_output"])
        # the count is of a real loop: whole vectors stored, a plausible body
        assert r["outputs_per_iteration"] >= 1 and 10 < r["instructions_per_output"] < 200
