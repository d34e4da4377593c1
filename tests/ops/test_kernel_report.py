"""The static performance model of the CUDA kernels (scripts/kernel_report.py): every
instantiation compiles for sm_90 without spills or a stack frame, the model counts every limit
(issue, each pipe, the load/store path with bank conflicts, barrier phases, occupancy, latency,
DRAM, waves) and takes the smallest, and its pieces give the known answers on small hand-written
loops."""

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


def test_registers_reads_wide_operands():
    assert kernel_report.registers(" R24, desc[UR6][R24.64]", 16) == {"R24", "R25", "R26", "R27"}
    assert kernel_report.registers(" RZ, RZ, R24, UR4, PT") == {"R24"}
    assert kernel_report.registers(" desc[UR4][R2.64], R8", 16) == {"R2", "R3", "R8", "R9", "R10", "R11"}


def test_reads_and_writes_follow_each_operand_s_role():
    rw = kernel_report.reads_and_writes
    assert rw("LDS", ".128", " R36, [R7+0x200]") == ({"R7"}, {"R36", "R37", "R38", "R39"})
    assert rw("STG", ".E.128", " desc[UR6][R40.64], R32") == ({"R40", "R41", "R32", "R33", "R34", "R35"}, set())
    assert rw("ISETP", ".GE.AND", " P1, PT, R62, R11, PT") == ({"R62", "R11"}, {"P1"})
    assert rw("IADD3", "", " R0, P5, P6, R36, R2, R59") == ({"R36", "R2", "R59"}, {"R0", "P5", "P6"})
    assert rw("DFMA", "", " R4, R6, 2, R4") == ({"R4", "R5", "R6", "R7"}, {"R4", "R5"})
    assert rw("SHFL", ".UP", " PT, R37, R39, 0x1, RZ") == ({"R39"}, {"R37"})
    assert kernel_report.parse("@!P5 FADD R40, R51, R114", 16, 4).reads == {"P5", "R51", "R114"}


def loop_of(body, strip_bytes=16, element=4, shared_lane_stride=16, block_warps=4):
    code = kernel_report.executed(body, strip_bytes, shared_lane_stride)
    return kernel_report.analyse_loop(code, strip_bytes, element, block_warps)


# One step of a march of 16-byte strips through shared memory: an asynchronous copy, its wait,
# the read, the store.
COPY_STEP = [
    "DEPBAR.LE SB0, 0x0",
    "LDS.128 R36, [R7]",
    "LDGSTS.E.BYPASS.128 [R7], desc[UR6][R90.64]",
    "LDGDEPBAR",
    "STG.E.128 desc[UR6][R40.64], R36",
    "@!P0 BRA 0x0",
]


def test_an_asynchronous_copy_takes_the_load_store_path_once_as_its_shared_write():
    # the copy's write of strips side by side (4 wavefronts), the shared read (4), the store (4)
    assert loop_of(COPY_STEP).wavefronts == 12


def test_instructions_predicated_on_not_pt_never_execute():
    assert kernel_report.parse("@!PT LDS RZ, [RZ]", 16, 16) is None
    with_filler = COPY_STEP[:2] + ["@!PT LDS RZ, [RZ]"] * 3 + COPY_STEP[2:]
    assert loop_of(with_filler) == loop_of(COPY_STEP)  # not an instruction, a wavefront or a pipe more
    assert kernel_report.parse("@!P0 LDS R1, [R2]", 16, 16).wavefronts == 4  # a predicate that may hold


def phased_step(barrier):
    """A step whose arithmetic is most of its issue and whose shared stores and loads are most of
    its load/store path, with `barrier` between the stores and the loads and after the loads."""
    arithmetic = [f"FFMA R{10 + i}, R{10 + i}, R2, R3" for i in range(40)]
    stores = [f"STS [R4+{hex(128 * i)}], R{10 + i}" for i in range(8)]
    loads = [f"LDS R{60 + i}, [R4+{hex(128 * i + 4)}]" for i in range(8)]
    sums = [f"FADD R{70 + i}, R{60 + i}, R{70 + i}" for i in range(8)]
    return [*arithmetic, *stores, barrier, *loads, *sums, barrier, "STG.E.128 desc[UR6][R40.64], R70", "@!P0 BRA 0x0"]


def test_barrier_phases_serialize_a_block_and_other_blocks_overlap_them():
    synced = loop_of(phased_step("BAR.SYNC.DEFER_BLOCKING 0x0"), shared_lane_stride=4, block_warps=8)
    free = loop_of(phased_step("NOP"), shared_lane_stride=4, block_warps=8)
    assert len(synced.phases) == 2 and not free.phases
    # The same instructions and path: without barriers the throughput limits, the load/store path
    # the least (20 wavefronts per warp); with them the stores' phase (the path behind 40 FFMA:
    # 106 clocks) and the loads' (8 loads of 8 warps, 30 clocks, the last sum: 98) in turn.
    limits = kernel_report.rates(synced, strip=4, warps=8, output_share=1.0, lane_use=1.0, bytes_per_output=8)
    unsynced = kernel_report.rates(free, strip=4, warps=8, output_share=1.0, lane_use=1.0, bytes_per_output=8)
    assert "barriers" not in unsynced and synced.phases == [106, 98]
    assert limits["barriers"] == pytest.approx(unsynced["load/store"] * 20 * 8 / (106 + 98))
    assert limits["barriers"] < min(unsynced[k] for k in ("issue", "fp32", "load/store"))
    twice = kernel_report.rates(synced, strip=4, warps=16, output_share=1.0, lane_use=1.0, bytes_per_output=8)
    assert twice["barriers"] == pytest.approx(2 * limits["barriers"])  # a second resident block overlaps them


# The next step's load (R2) is issued before the use of the load issued before the back edge (R3).
OVERLAPPED = [
    "LDG.E R2, desc[UR4][R10.64]",
    "FADD R5, R3, R3",
    "FADD R6, R2, R2",
    "STG.E desc[UR4][R12.64], R5",
    "LDG.E R3, desc[UR4][R14.64]",
    "FADD R7, R7, R7",
    "STG.E desc[UR4][R12.64+0x4], R6",
    "@!P0 BRA 0x0",
]


def test_loads_issued_before_the_previous_step_s_use_are_in_flight_together():
    # two planes a loop (one float per lane, two stores): both loads wait out one latency together
    assert loop_of(OVERLAPPED, strip_bytes=4).planes_in_flight == 2
    separate = [OVERLAPPED[1], OVERLAPPED[0], *OVERLAPPED[2:]]  # R3 used before R2 is loaded: one after the other
    assert loop_of(separate, strip_bytes=4).planes_in_flight == 1


def test_a_copy_wait_keeps_the_groups_it_lets_pend_in_flight():
    ring = [*COPY_STEP[:-1], *COPY_STEP[:-1], COPY_STEP[-1]]  # two steps, a group each
    assert loop_of(ring).planes_in_flight == 1  # DEPBAR.LE SB0, 0x0: the group just closed
    deeper = [op.replace("SB0, 0x0", "SB0, 0x1") for op in ring]
    assert loop_of(deeper).planes_in_flight == 2  # and the one before it


def test_a_partial_last_wave_and_each_wave_s_ramp_cost_their_share():
    assert kernel_report.waves(2 * 132, 1) == (2, 1.0)
    assert kernel_report.waves(3 * 132 // 2, 1) == (2, 0.75)  # one wave and a half
    assert kernel_report.waves(3 * 132, 2) == (2, 0.75)
    moved = 4.3e12 * 12e-6  # 12 us at copy bandwidth, and a 0.6 us latency at each end of each wave
    assert kernel_report.ramp_use(1.0, 1, moved) == pytest.approx(12 / 13.2)
    assert kernel_report.ramp_use(1.0, 2, moved) == pytest.approx(12 / 14.4)
    assert kernel_report.ramp_use(0.5, 1, moved) == pytest.approx(24 / 25.2)


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
def test_16_bit_3d_backward_keeps_its_level_at_the_benchmark_shapes(report):
    """The op accumulates in float32 whatever the dtype of its tensors (it is a training op), so the
    16-bit 3D backward pass runs the float32 instruction stream, conversions added, in the same
    barrier phases while it moves half the bytes: its instructions bind it, not memory traffic.
    Its floor holds the level the model gives it."""
    _, rows = report
    sixteen_bit = [r for r in rows if r["checked"] and sixteen_bit_3d_backward(r)]
    assert len(sixteen_bit) == 2 and all(len(r["at_shapes"]) == 2 for r in sixteen_bit)
    below = below_the_floor_at_shapes(rows, sixteen_bit_3d_backward)
    assert not below, below
