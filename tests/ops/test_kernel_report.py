"""The static performance model of the CUDA kernels (scripts/kernel_report.py): every
instantiation compiles for sm_90 without spills or a stack frame, the model counts every limit
(issue, each pipe, the load/store path with bank conflicts, occupancy, latency, DRAM) and takes the
smallest, and its pieces give the known answers on known cases."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import ROOT
from ops.library import DEFAULT_CUDA_HOME
from scripts import kernel_report

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
    return result, json.loads(out.read_text()) if out.exists() else []


def test_shared_wavefronts_count_bank_conflicts():
    assert kernel_report.shared_wavefronts(4, 4) == 1  # one word per lane, consecutive: every bank once
    assert kernel_report.shared_wavefronts(4, 16) == 4  # a lane's strip kept together: 4 lanes per bank
    assert kernel_report.shared_wavefronts(8, 8) == 2  # 256 bytes: two phases, no conflict
    assert kernel_report.shared_wavefronts(16, 16) == 4  # 512 bytes: four phases, no conflict
    assert kernel_report.shared_wavefronts(4, 128) == 32  # every lane on bank 0


def test_resident_warps_count_registers_blocks_and_shared_memory():
    assert kernel_report.resident_warps(32, 4, 0) == 64  # the SM's warp limit
    assert kernel_report.resident_warps(128, 8, 13312) == 16  # two blocks of 8 warps fill the register file
    assert kernel_report.resident_warps(160, 4, 0) == 12  # 160 x 32 x 12 = 61,440 registers
    assert kernel_report.resident_warps(70, 1, 0) == 7  # one-warp blocks hold registers for groups of 4 warps
    assert kernel_report.resident_warps(32, 4, 100 * 1024) == 8  # shared memory: two blocks of 101 KB


def test_registers_of_reads_wide_operands():
    assert kernel_report.registers_of(" R24, desc[UR6][R24.64]", 16) == {24, 25, 26, 27}
    assert kernel_report.registers_of(" RZ, RZ, R24") == {24}
    assert kernel_report.registers_of(" desc[UR4][R2.64], R8", 16) == {2, 3, 8, 9, 10, 11}


def test_the_binding_limit_is_the_smallest():
    loop = kernel_report.Loop(instructions=200, outputs=8, pipes={"fp32": 100, "mufu/cvt": 0}, wavefronts=20,
                              lead_planes=1.0)
    limits = kernel_report.rates(loop, strip=4, warps=16, output_share=1.0, lane_use=1.0, bytes_per_output=8)
    assert set(limits) == {"issue", "fp32", "load/store", "latency", "DRAM"}
    # issue: 200 / 4 = 50 clocks for 256 outputs; fp32: 100 / 4 = 25 clocks; load/store 20 clocks
    assert limits["issue"] == pytest.approx(limits["fp32"] / 2) == pytest.approx(limits["load/store"] * 20 / 50)
    # latency: 16 warps x 1 plane / 600 ns x 128 outputs per plane on 132 SMs, over 4.3e12 / 8
    assert limits["latency"] == pytest.approx(132 * 16 / 600e-9 * 128 / (4.3e12 / 8))
    halved = kernel_report.rates(loop, strip=4, warps=8, output_share=1.0, lane_use=1.0, bytes_per_output=8)
    assert halved["latency"] == pytest.approx(limits["latency"] / 2)
    assert kernel_report.binding(limits) == (min(limits, key=limits.get), min(1.0, min(limits.values())))


@pytest.mark.usefixtures("cpu_library")
def test_the_launch_geometry_comes_from_the_kernels():
    g = kernel_report.launch((2, 32, 128, 128, 128), "float32", backward=True)
    assert (g["strip"], g["unit_warps"], g["rows_per_unit"], g["threads"]) == (4, 16, 14, 512)
    assert g["shared_lane_stride"] == 4  # conflict-free: one word per lane
    assert g["units"] == 64 * g["row_groups"] * g["spans"] * g["segments"]


@pytest.mark.usefixtures("cpu_library")
def test_short_3d_forward_rows_are_packed_several_to_a_warp():
    shape = (2, 16, 64, 96, 96)  # 96 float16 samples: 12 strips of 8
    g = kernel_report.launch(shape, "float16", backward=False)
    assert (g["strip"], g["row_lanes"], g["rows_per_warp"], g["rows_per_unit"], g["row_groups"]) == (8, 12, 2, 2, 48)
    backward = kernel_report.launch(shape, "float16", backward=True)  # its rows trade u through shared memory
    assert (backward["row_lanes"], backward["rows_per_warp"]) == (32, 1)
    long_rows = kernel_report.launch((1, 1, 8, 8, 256), "float16", backward=False)
    assert (long_rows["row_lanes"], long_rows["rows_per_warp"]) == (32, 1)


@pytest.mark.usefixtures("cpu_library")
def test_segments_fill_an_idle_device_and_stay_long_on_a_full_one():
    shape = (2, 16, 64, 96, 96)  # the 3D backward pass: 224 units per segment position, 4 extra planes each
    idle = kernel_report.launch(shape, "float32", backward=True, resident_units=10_000)
    assert (idle["segment"], idle["segments"], idle["extra_planes"]) == (8, 8, 4)  # one wave: the shortest
    # On 132 resident units: 1 segment takes 2 waves x 68 steps = 136; 2: 4 x 36 = 144; 4: 7 x 20 = 140;
    # 5 (of 13): 9 x 17 = 153; 8: 14 x 12 = 168.
    full = kernel_report.launch(shape, "float32", backward=True, resident_units=132)
    assert (full["segment"], full["segments"], full["units"]) == (64, 1, 224)
    assert kernel_report.launch(shape, "float32", backward=False)["extra_planes"] == 2
    assert kernel_report.launch(shape, "float32", backward=True, resident_units=2**62)["segments"] == 8
    for outer in (1, 5):  # shorter than a segment: one, of kMinSegment planes (the march stops at the end)
        short = kernel_report.launch((2, 3, outer, 9, 16), "float32", backward=True, resident_units=1)
        assert (short["segment"], short["segments"]) == (8, 1)


@needs_nvcc
def test_report_covers_every_instantiation_and_limit(report):
    result, rows = report
    assert rows, result.stdout[-3000:] + result.stderr[-3000:]
    kinds = {(r["ndim"], r["direction"], r["dtype"], r["loads"]) for r in rows}
    assert len(kinds) == len(rows) == 2 * 2 * 4 * 2
    for r in rows:
        assert {"issue", "load/store", "latency", "DRAM"} <= set(r["limits"])
        assert r["modeled_fraction"] == pytest.approx(min(1.0, min(r["limits"].values())))
        assert r["resident_warps"] >= 8 and 0 < r["lead_planes"] <= 3  # the ring of whole-vector loads: 3 slots
    vector = [r for r in rows if r["loads"] == "vector"]
    assert all(r["at_shapes"] for r in vector) and all(len(r["at_shapes"]) == 2 for r in vector)
    assert "| 2D forward float32 |" in result.stdout and "ceiling, not a promise" in result.stdout


@needs_nvcc
def test_no_instantiation_spills_or_uses_a_stack_frame(report):
    _, rows = report
    offenders = [r["kernel"] for r in rows if r["spills"] or r["stack"]]
    assert rows and not offenders, offenders


@needs_nvcc
def test_every_block_fits_the_shared_memory_of_every_architecture_built(report):
    """sm_86, sm_89 and sm_120 let a block opt into 99 KB of shared memory (sm_80 163 KB, sm_90
    227 KB): a block that needs more would be refused on those GPUs at run time."""
    _, rows = report
    too_big = [(r["kernel"], r["shared"]) for r in rows if r["shared"] > 99 * 1024]
    assert rows and not too_big, too_big


@needs_nvcc
def test_float32_and_16_bit_kernels_meet_the_model_at_its_best_geometry(report):
    _, rows = report
    checked = [r for r in rows if r["checked"]]
    assert len(checked) == 12
    below = [(r["kernel"], round(r["modeled_fraction"], 2), r["binding"]) for r in checked
             if r["modeled_fraction"] < kernel_report.floor(r["ndim"], r["direction"], r["dtype"], at_shape=False)]
    assert not below, below


def below_the_floor_at_shapes(rows, which):
    return [(r["kernel"], shape, round(at["fraction"], 2), at["binding"])
            for r in rows if r["checked"] and which(r) for shape, at in r["at_shapes"].items()
            if at["fraction"] < kernel_report.floor(r["ndim"], r["direction"], r["dtype"], at_shape=True)]


def sixteen_bit_3d_backward(row) -> bool:
    return (row["ndim"], row["direction"]) == (3, "backward") and row["dtype"] in ("float16", "bfloat16")


@needs_nvcc
def test_float32_and_16_bit_kernels_meet_the_model_at_the_benchmark_shapes(report):
    _, rows = report
    checked = [r for r in rows if r["checked"] and not sixteen_bit_3d_backward(r)]
    assert len(checked) == 10 and all(len(r["at_shapes"]) == 2 for r in checked)
    below = below_the_floor_at_shapes(rows, lambda r: not sixteen_bit_3d_backward(r))
    assert not below, below


@needs_nvcc
@pytest.mark.xfail(strict=True, reason="issue 17 is open: the 16-bit 3D backward pass is bound by instruction "
                   "issue (about 100 instructions per output sample, 70 of them its float arithmetic, conversions, "
                   "shared-memory accesses and shuffles), so it moves half float32's bytes per instruction; 0.45 "
                   "at (2, 16, 64, 96, 96), where 96-sample rows keep 24 of 32 lanes busy, needs about 60, which "
                   "takes packed half-precision arithmetic, and the op's contract accumulates in float32")
def test_16_bit_3d_backward_meets_the_model_at_the_benchmark_shapes(report):
    _, rows = report
    below = below_the_floor_at_shapes(rows, sixteen_bit_3d_backward)
    assert not below, below
