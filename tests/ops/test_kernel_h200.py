"""The H200 model's pieces (scripts/kernel_model/h200.py) give the known answers on small
hand-written loops: bank conflicts, resident warps, asynchronous copies on the load/store path,
filler that never executes, barrier phases, loads in flight together, partial waves and ramps."""

from __future__ import annotations

import pytest

from scripts.kernel_model import h200


def test_shared_wavefronts_count_bank_conflicts():
    assert h200.shared_wavefronts(4, 4) == 1  # one word per lane, consecutive: every bank once
    assert h200.shared_wavefronts(4, 16) == 4  # a lane's strip kept together: 4 lanes per bank
    assert h200.shared_wavefronts(8, 8) == 2  # 256 bytes: two phases, no conflict
    assert h200.shared_wavefronts(16, 16) == 4  # 512 bytes: four phases, no conflict
    assert h200.shared_wavefronts(4, 128) == 32  # every lane on bank 0


def test_resident_warps_count_registers_blocks_and_shared_memory():
    assert h200.resident_warps(32, 4, 0) == 64  # the SM's warp limit
    assert h200.resident_warps(128, 8, 13312) == 16  # two blocks of 8 warps fill the register file
    assert h200.resident_warps(160, 4, 0) == 12  # 160 x 32 x 12 = 61,440 registers
    assert h200.resident_warps(70, 1, 0) == 7  # one-warp blocks hold registers for groups of 4 warps
    assert h200.resident_warps(32, 4, 100 * 1024) == 8  # shared memory: two blocks of 101 KB


def loop_of(body, strip_bytes=16, element=4, shared_lane_stride=16, block_warps=4):
    code = h200.executed(body, strip_bytes, shared_lane_stride)
    return h200.analyse_loop(code, strip_bytes, element, block_warps)


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
    with_filler = COPY_STEP[:2] + ["@!PT LDS RZ, [RZ]"] * 3 + COPY_STEP[2:]
    assert loop_of(with_filler) == loop_of(COPY_STEP)  # not an instruction, a wavefront or a pipe more
    (may_hold,) = h200.executed(["@!P0 LDS R1, [R2]"], 16, 16)
    assert may_hold.wavefronts == 4  # a predicate that may hold


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
    limits = h200.rates(synced, strip=4, warps=8, output_share=1.0, lane_use=1.0, bytes_per_output=8)
    unsynced = h200.rates(free, strip=4, warps=8, output_share=1.0, lane_use=1.0, bytes_per_output=8)
    assert "barriers" not in unsynced and synced.phases == [106, 98]
    assert limits["barriers"] == pytest.approx(unsynced["load/store"] * 20 * 8 / (106 + 98))
    assert limits["barriers"] < min(unsynced[k] for k in ("issue", "fp32", "load/store"))
    twice = h200.rates(synced, strip=4, warps=16, output_share=1.0, lane_use=1.0, bytes_per_output=8)
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
    assert h200.waves(2 * 132, 1) == (2, 1.0)
    assert h200.waves(3 * 132 // 2, 1) == (2, 0.75)  # one wave and a half
    assert h200.waves(3 * 132, 2) == (2, 0.75)
    moved = 4.3e12 * 12e-6  # 12 us at copy bandwidth, and a 0.6 us latency at each end of each wave
    assert h200.ramp_use(1.0, 1, moved) == pytest.approx(12 / 13.2)
    assert h200.ramp_use(1.0, 2, moved) == pytest.approx(12 / 14.4)
    assert h200.ramp_use(0.5, 1, moved) == pytest.approx(24 / 25.2)
