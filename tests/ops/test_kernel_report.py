"""The static performance model of the CUDA kernels end to end (scripts/kernel_report.py, the
package scripts/kernel_model/): every instantiation compiles for every default architecture
without spills or a stack frame and within its shared memory, and the model counts every limit
(issue, each pipe, the load/store path with bank conflicts, barrier phases, occupancy, latency,
DRAM, waves), takes the smallest and holds the kernels to their floors. Its pieces:
tests/ops/test_kernel_sass.py, test_kernel_geometry.py and test_kernel_h200.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import ROOT
from ops.library import DEFAULT_CUDA_HOME
from scripts.kernel_model.report import floor

NVCC = Path(DEFAULT_CUDA_HOME) / "bin" / "nvcc"


def needs_nvcc(test):
    """Slow, and skipped where the kernels cannot be compiled."""
    test = pytest.mark.slow(test)
    no_nvcc = f"nvcc not found at {NVCC}: the kernels cannot be compiled"
    test = pytest.mark.skipif(not NVCC.exists(), reason=no_nvcc)(test)
    return pytest.mark.skipif(torch.version.cuda is None, reason="torch is a CPU-only build")(test)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "kernels.json"
    result = subprocess.run(
        [sys.executable, "scripts/kernel_report.py", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=1200,
    )
    written = json.loads(out.read_text()) if out.exists() else {"sm_90": [], "architectures": []}
    return result, written["sm_90"], written["architectures"]


@needs_nvcc
def test_report_covers_every_instantiation_and_limit(report):
    result, rows, _ = report
    assert rows, result.stdout[-3000:] + result.stderr[-3000:]
    kinds = {(r["ndim"], r["direction"], r["dtype"], r["loads"]) for r in rows}
    assert len(kinds) == len(rows) == 2 * 2 * 4 * 2
    for r in rows:
        assert {"issue", "load/store", "latency", "DRAM"} <= set(r["limits"])
        assert ("barriers" in r["limits"]) == ((r["ndim"], r["direction"]) == (3, "backward"))  # its BAR.SYNC
        assert r["modeled_fraction"] == pytest.approx(min(1.0, min(r["limits"].values())))
        assert r["resident_warps"] >= 8 and 0 < r["planes_in_flight"] <= 3
    vector = [r for r in rows if r["loads"] == "vector"]
    # the whole-vector loads' ring: three slots, two in the 3D backward pass
    assert {(r["ndim"], r["direction"], r["planes_in_flight"]) for r in vector} == {
        (2, "forward", 3), (2, "backward", 3), (3, "forward", 3), (3, "backward", 2)}
    assert all(r["at_shapes"] for r in vector) and all(len(r["at_shapes"]) == 2 for r in vector)
    assert "| 2D forward float32 |" in result.stdout and "ceiling, not a promise" in result.stdout


@needs_nvcc
def test_no_instantiation_spills_or_uses_a_stack_frame(report):
    _, rows, _ = report
    offenders = [r["kernel"] for r in rows if r["spills"] or r["stack"]]
    assert rows and not offenders, offenders


@needs_nvcc
def test_every_architecture_built_has_code_that_runs_there(report):
    """Each native architecture of the default build, read from its own code: no spills or stack
    frame; every block that launches fits the shared memory the architecture lets a block opt
    into; cp.async from 8.0 on and none on 7.5, which lacks it."""
    result, _, archs = report
    built = sorted({r["arch"] for r in archs}, key=lambda a: int(a[3:]))
    assert built[:3] == ["sm_75", "sm_80", "sm_90"], built
    assert all(len([r for r in archs if r["arch"] == arch]) == 32 for arch in built)
    assert not [r for r in archs if r["spills"] or r["stack"]]
    too_big = [(r["arch"], r["kernel"]) for r in archs if r["launched"] and r["shared"] > r["shared_limit"]]
    assert not too_big
    limits = {r["arch"]: r["shared_limit"] for r in archs}
    assert limits["sm_75"] == 64 * 1024 and limits["sm_80"] == 163 * 1024 and limits["sm_90"] == 227 * 1024
    vector = [r for r in archs if r["loads"] == "vector"]
    assert not [r["kernel"] for r in vector if r["arch"] == "sm_75" and r["async_copies"]]
    assert not [(r["arch"], r["kernel"]) for r in vector if r["arch"] != "sm_75" and not r["async_copies"]]
    # on a T4 the float32 and float64 3D backward blocks (88 KB of staging) give way to the general form
    replaced = {(r["arch"], r["kernel"]) for r in archs if not r["launched"]}
    assert replaced == {("sm_75", "3D backward float32"), ("sm_75", "3D backward float64")}
    assert "| sm_75 | 32 |" in result.stdout and "3D backward float32, 3D backward float64 |" in result.stdout


@needs_nvcc
def test_float32_and_16_bit_kernels_meet_the_model_at_its_best_geometry(report):
    _, rows, _ = report
    checked = [r for r in rows if r["checked"]]
    assert len(checked) == 12
    below = [(r["kernel"], round(r["modeled_fraction"], 2), r["binding"]) for r in checked
             if r["modeled_fraction"] < floor(r["ndim"], r["direction"], r["dtype"], at_shape=False)]
    assert not below, below


def below_the_floor_at_shapes(rows, which):
    return [(r["kernel"], shape, round(at["fraction"], 2), at["binding"])
            for r in rows if r["checked"] and which(r) for shape, at in r["at_shapes"].items()
            if at["fraction"] < floor(r["ndim"], r["direction"], r["dtype"], at_shape=True)]


def sixteen_bit_3d_backward(row) -> bool:
    return (row["ndim"], row["direction"]) == (3, "backward") and row["dtype"] in ("float16", "bfloat16")


@needs_nvcc
def test_float32_and_16_bit_kernels_meet_the_model_at_the_benchmark_shapes(report):
    _, rows, _ = report
    checked = [r for r in rows if r["checked"] and not sixteen_bit_3d_backward(r)]
    assert len(checked) == 10 and all(len(r["at_shapes"]) == 2 for r in checked)
    below = below_the_floor_at_shapes(rows, lambda r: not sixteen_bit_3d_backward(r))
    assert not below, below


@needs_nvcc
def test_16_bit_3d_backward_keeps_its_level_at_the_benchmark_shapes(report):
    """The op accumulates in float32 whatever the dtype of its tensors (it is a training op), so the
    16-bit 3D backward pass runs the float32 instruction stream, conversions added, in the same
    barrier phases while it moves half the bytes: its instructions bind it, not memory traffic.
    Its floor holds the level the model gives it."""
    _, rows, _ = report
    sixteen_bit = [r for r in rows if r["checked"] and sixteen_bit_3d_backward(r)]
    assert len(sixteen_bit) == 2 and all(len(r["at_shapes"]) == 2 for r in sixteen_bit)
    below = below_the_floor_at_shapes(rows, sixteen_bit_3d_backward)
    assert not below, below
