"""The performance model: an H200 (sm_90) at 1.98 GHz with 132 SMs. Per SM and clock (CUDA C++
Programming Guide, "Arithmetic Instructions", compute capability 9.0, in thread operations):

    issue              4 warp instructions (one per scheduler)
    FP32 (FADD, FMUL, FFMA, HADD2/HMUL2/HFMA2 pairs)       128
    IMAD (the integer multiply-add, also used as a move)     64
    integer and logic, compare, select, min/max               64
    FP64 (DADD, DMUL, DFMA, DSETP)                           64
    MUFU (rsqrt, sqrt, rcp) and type conversions              16
    load/store path: LDG, STG, LDGSTS, LDS, STS, SHFL, LDC share it, one 128-byte wavefront
      per clock; a global access by 32 lanes whose strips are B bytes apart takes 32 B / 128
      wavefronts (sector-wise, whatever the access width); a shared access takes the wavefronts
      of its bank pattern (32 banks of 4 bytes; 8- and 16-byte accesses run in half- and
      quarter-warp phases), from the layout's lane stride; a shuffle takes one. An asynchronous
      copy (LDGSTS, the SASS of cp.async: Programming Guide, "Asynchronous Data Copies") moves
      global memory into shared memory without a register: it is one global load, whose bytes
      are the DRAM model's, and one shared-memory write by the copy unit, which is what it
      takes on the path (the wavefronts of the write, lanes' strips side by side).

A warp's loop iteration therefore costs an SM max(instructions / 4, each pipe's count / its rate,
its wavefronts) clocks, and produces outputs_per_iteration x 32 outputs (x the unit's warps with outputs over its
warps in the 3D backward pass, whose two halo warps per unit run the loop without outputs of
their own).

Barriers: a loop with BAR.SYNC runs in phases (cut after each barrier, the last one's phase
running over the back edge), and no warp of a block starts a phase before all of them have
finished the one before, so a block cannot overlap a phase with its neighbours; only the SM's
other resident blocks can. A block's phase takes the most of its throughput share (its warps
times each resource's clocks for the phase's instructions, as above) and its warps' latency
chain: one warp's in-order schedule, each instruction a clock after the one before and not
before its operands are ready, a load/store served only after the block's earlier accesses of
the phase (the warps left the barrier together and issue the same accesses: each takes the
block's warps x its wavefronts), the phase over when its last result is in. Result latencies,
in clocks, of the order published microbenchmarks measure from Volta to Hopper: 4 for FP32, IMAD
and integer, 8 for FP64, 16 for MUFU and conversions, 30 for a shared load, shuffle or constant
load after the path served it; a global load's DRAM latency is the latency limit's, below. The
phases' sum is a block's iteration; R resident blocks share the SM, so at best R block
iterations take that long (the "barriers" limit; the throughput limits above still bound the R
blocks together).

Resident warps per SM: 64 at most, 32 blocks, 65,536 registers allocated per warp in units of
256 (registers per lane rounded up to 8) and per block in groups of 4 warps, 228 KB of shared
memory of which each block reserves 1 KB beside its own.

Latency (Little's law): a load must return before the instruction that first reads it (a move of
a loaded register counts: it waits), and a group of asynchronous copies (LDGSTS ... LDGDEPBAR)
before the DEPBAR that waits for it. A warp waiting for a load waits a DRAM latency L for it
(600 ns under load: unloaded pointer chasing measures 270-480 ns on Hopper; a stream near peak
bandwidth queues longer), and the loads it issued between that load and the wait are in flight
with it. So per loop iteration a warp waits out as many latencies as the longest chain of waits in which each load is
issued after the previous wait (cyclically: a load issued before the back edge whose first use
is in the next step counts with the next step's loads issued before that use), and the planes in
flight, d, are the loop's planes over that many latencies: a warp marches at most d / L planes
per second, an SM at most resident_warps x d / L.

DRAM: a device-to-device copy reaches 4.3e12 B/s (scripts/gpu_check.sh measures it); the op
moves 2 (forward: x in, y out) or 3 (backward: x, grad_y, grad_x) tensors; halo rows and the
planes around a segment's ends are assumed to hit L2.

The modeled fraction of copy bandwidth is the smallest of the issue/pipe, barrier, latency and
DRAM rates over the DRAM rate, capped at 1. "At the model's best geometry" every lane owns
outputs and segments are long; at a shape, the launch that make_march_geometry() makes for it
(aligned data, whole-vector kernel; its segments split for the kernel's resident units on the
H200, as the CUDA launcher splits them for the device it runs on) scales every rate but DRAM's by
its lane use (owned samples over the samples its lanes carry: span overlap, rows shorter than a
warp's strips and not packed, halo row groups past the volume), its segment overhead
(segment / (segment + extra_planes): forward 2, the planes primed before the first output;
backward 4, two primed and two marched beyond its own outputs; priming counted as whole steps)
and its waves' use (the grid's blocks over waves x SMs x resident blocks: the last wave's empty
slots), limits the resident warps to those the launch has, and then takes off each wave's ramp:
a wave's blocks start together, so their first loads wait a DRAM latency with nothing resident
to overlap them, and finish together, so the SM drains its last planes with no loads behind
them, about a latency at each end of every wave beside the time the bytes take at the modeled
rate. It is a ceiling, not a promise; scripts/gpu_check.sh measures the kernels where a GPU is
lent.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from . import sass
from .geometry import launch, output_warps

ARCH = "sm_90"
SMS = 132
CLOCK_HZ = 1.98e9
ISSUE_PER_CLOCK = 4.0  # warp instructions per SM
COPY_BYTES_PER_S = 4.3e12
DRAM_LATENCY_S = 600e-9
MAX_WARPS, MAX_BLOCKS = 64, 32
REGISTERS, REGISTER_UNIT, WARP_GROUP = 65536, 256, 4
SHARED_PER_SM, SHARED_RESERVED = 228 * 1024, 1024
WAVEFRONT_BYTES, BANKS = 128, 32
# Thread operations per SM and clock of each pipe (warp instructions per clock = rate / 32).
PIPE_RATES = {"fp32": 128, "imad": 64, "alu": 64, "fp64": 64, "mufu/cvt": 16}
PIPES = {
    "fp32": {"FADD", "FMUL", "FFMA", "FMUL2", "FFMA2", "FADD2", "HADD2", "HMUL2", "HFMA2", "FSWZADD"},
    "imad": {"IMAD"},
    "alu": {"IADD3", "IADD", "MOV", "ISETP", "LEA", "SHF", "SHL", "SHR", "SEL", "FSEL", "FSETP", "FSET", "FMNMX",
            "VIADD", "PRMT", "LOP3", "LOP", "PLOP3", "VIMNMX", "VIADDMNMX", "IMNMX", "IABS", "P2R", "R2P", "BMSK",
            "SGXT", "CSET", "CSETP", "VOTE", "FCHK", "IDP", "IMNMX3"},
    "fp64": sass.FP64,
    "mufu/cvt": {"MUFU", "F2F", "F2I", "I2F", "F2FP", "I2FP", "FRND", "I2I", "POPC", "FLO", "BREV"},
}
# Result latencies in clocks, for the latency chain of a barrier phase (see the docstring).
PIPE_LATENCY = {"fp32": 4, "imad": 4, "alu": 4, "fp64": 8, "mufu/cvt": 16}
SHARED_PATH_LOADS, SHARED_PATH_LATENCY = {"LDS", "SHFL", "LDC"}, 30
GLOBAL_ACCESS = {"LDG", "STG"}
SHARED_ACCESS = {"LDS", "STS"}


@dataclass(frozen=True)
class Instruction(sass.Instruction):
    """A SASS instruction and what it takes of an SM."""

    pipe: str | None
    wavefronts: float  # of the load/store path, per warp
    latency: int  # clocks until its result is ready: from issue, or from when the load/store path served it


@dataclass
class Loop:
    instructions: int
    outputs: float  # per lane and iteration
    pipes: dict[str, int]
    wavefronts: float  # of the load/store path, per warp and iteration
    planes_in_flight: float  # the loop's planes over the DRAM latencies a warp waits out per iteration (d)
    phases: list[float] = field(default_factory=list)  # a block's clocks for each barrier phase, the SM to itself
    block_warps: int = 1


def shared_wavefronts(width: int, lane_stride: int) -> int:
    """Wavefronts of a warp's shared access of `width` bytes per lane, lanes `lane_stride` bytes
    apart: accesses wider than 4 bytes run in phases of 128 bytes' worth of lanes, and a phase
    takes as many wavefronts as the most distinct words any one bank must deliver."""
    lanes_per_phase = max(1, WAVEFRONT_BYTES // width)
    total = 0
    for phase in range(0, 32, lanes_per_phase):
        words_per_bank: dict[int, set[int]] = {}
        for lane in range(phase, phase + lanes_per_phase):
            for word in range(lane * lane_stride // 4, (lane * lane_stride + width) // 4):
                words_per_bank.setdefault(word % BANKS, set()).add(word)
        total += max(len(words) for words in words_per_bank.values())
    return total


def wavefronts_of(name: str, modifiers: str, strip_bytes: int, shared_lane_stride: int) -> float:
    if name in GLOBAL_ACCESS:
        return 32 * strip_bytes / WAVEFRONT_BYTES
    if name == "LDGSTS":
        # cp.async (CUDA C++ Programming Guide, "Asynchronous Data Copies"; in SASS LDGSTS, the
        # asynchronous global-to-shared copy of the CUDA Binary Utilities' instruction set
        # reference) moves global memory into shared memory without a register: one global load,
        # whose bytes the DRAM model counts, and one write into shared memory by the copy unit,
        # which is all it takes on the path (lanes' strips side by side).
        return shared_wavefronts(sass.access_bytes(modifiers), sass.access_bytes(modifiers))
    if name in SHARED_ACCESS:
        return shared_wavefronts(sass.access_bytes(modifiers), shared_lane_stride)
    return 1 if name in ("SHFL", "LDC") else 0


def result_latency(name: str, pipe: str | None) -> int:
    if name == "LDG":
        return 0  # its DRAM latency is the latency limit's (Little's law)
    return SHARED_PATH_LATENCY if name in SHARED_PATH_LOADS else PIPE_LATENCY.get(pipe, 4)


def costed(instruction: sass.Instruction, strip_bytes: int, shared_lane_stride: int) -> Instruction:
    """`instruction` with its pipe, its wavefronts (lanes' strips `strip_bytes` long, shared
    memory laid out `shared_lane_stride` bytes per lane) and its result latency."""
    name, modifiers = instruction.name, instruction.modifiers
    pipe = next((p for p, names in PIPES.items() if name in names), None)
    return Instruction(**vars(instruction), pipe=pipe,
                       wavefronts=wavefronts_of(name, modifiers, strip_bytes, shared_lane_stride),
                       latency=result_latency(name, pipe))


def executed(body: list[str], strip_bytes: int, shared_lane_stride: int) -> list[Instruction]:
    """The instructions of `body` that execute, parsed and costed."""
    return [costed(i, strip_bytes, shared_lane_stride) for i in map(sass.parse, body) if i is not None]


def pipe_counts(code: list[Instruction]) -> dict[str, int]:
    counts = dict.fromkeys(PIPE_RATES, 0)
    for instruction in code:
        if instruction.pipe:
            counts[instruction.pipe] += 1
    return counts


def resource_clocks(instructions: int, pipes: dict[str, int], wavefronts: float) -> dict[str, float]:
    """SM clocks per warp of each resource: the issue, the load/store path and each pipe used."""
    clocks = {"issue": instructions / ISSUE_PER_CLOCK, "load/store": wavefronts}
    return clocks | {pipe: count / (PIPE_RATES[pipe] / 32) for pipe, count in pipes.items() if count}


def analyse_loop(code: list[Instruction], strip_bytes: int, element: int, block_warps: int) -> Loop:
    outputs = sass.stored_bytes(code) / element
    planes = outputs / (strip_bytes // element)
    rounds = latency_rounds(load_waits(code) + copy_waits(code), len(code))
    phases = [phase_clocks(phase, block_warps) for phase in barrier_phases(code)]
    return Loop(len(code), outputs, pipe_counts(code), sum(i.wavefronts for i in code),
                planes / rounds if rounds else math.inf, phases, block_warps)


def load_waits(code: list[Instruction]) -> list[tuple[int, int]]:
    """(position, lead) of each global load into registers (LDG): the lead is the instructions
    until one reads a register the load wrote (cyclically through the loop)."""
    waits = []
    for i, instruction in enumerate(code):
        if instruction.name != "LDG":
            continue
        lead = next((k for k in range(1, len(code) + 1) if code[(i + k) % len(code)].reads & instruction.writes), None)
        if lead:
            waits.append((i, lead))
    return waits


def copy_waits(code: list[Instruction]) -> list[tuple[int, int]]:
    """(position, lead) of each group of asynchronous copies (LDGSTS into shared memory), from the
    LDGDEPBAR that closes it: a wait `DEPBAR.LE SB0, N` lets the N most recent groups stay in
    flight, so the group it waits for was closed at the (N + 1)-th LDGDEPBAR before it."""
    waits = []
    size = len(code)
    for i, instruction in enumerate(code):
        if instruction.name != "DEPBAR" or ".LE" not in instruction.modifiers:
            continue
        pending = int(instruction.operands.split(",")[-1].strip(), 0)
        closes = (k for k in range(1, size * (pending + 1) + 1) if code[(i - k) % size].name == "LDGDEPBAR")
        lead = next(itertools.islice(closes, pending, None), None)
        if lead:
            waits.append(((i - lead) % size, lead))
    return waits


def latency_rounds(waits: list[tuple[int, int]], size: int) -> float:
    """DRAM latencies a warp waits out per iteration of a loop of `size` instructions: the most
    waits (position, lead) that must follow one another, each load issued at or after the previous
    one's first use, the loop repeated. Greedily, from a point the next wait is the one that ends
    first among the loads issued at or after it (as for disjoint intervals on a line); the points
    repeat modulo the loop, and that cycle's waits per loop give the rate."""
    if not waits:
        return 0.0
    point, count, seen = 0, 0, {}
    while point % size not in seen:
        seen[point % size] = (point, count)
        point = min(position + size * math.ceil((point - position) / size) + lead for position, lead in waits)
        count += 1
    start, at = seen[point % size]
    return (count - at) * size / (point - start)


def barrier_phases(code: list[Instruction]) -> list[list[Instruction]]:
    """The loop cut after each BAR.SYNC, the last barrier's phase running over the back edge to the
    first; none without a barrier."""
    ends = [i for i, instruction in enumerate(code) if instruction.name == "BAR" and ".SYNC" in instruction.modifiers]
    if not ends:
        return []
    cycle = code[ends[-1] + 1:] + code[: ends[-1] + 1]  # from just after the last barrier to it
    cuts = [0, *(e - ends[-1] + len(code) if e < ends[-1] else len(code) for e in ends)]
    return [cycle[a:b] for a, b in itertools.pairwise(cuts)]


def phase_clocks(phase: list[Instruction], block_warps: int) -> float:
    """A block's clocks for one barrier phase with the SM to itself: the most of its throughput
    share and its warps' latency chain (see the docstring)."""
    clock, path, ready = -1.0, 0.0, {}
    for instruction in phase:
        clock = max([clock + 1, *(ready.get(r, 0.0) for r in instruction.reads)])
        served = clock
        if instruction.wavefronts:
            path = max(path, clock) + block_warps * instruction.wavefronts
            served = path
        ready.update(dict.fromkeys(instruction.writes, served + instruction.latency))
    chain = max([clock + 1, path, *ready.values()])
    share = resource_clocks(len(phase), pipe_counts(phase), sum(i.wavefronts for i in phase))
    return max(chain, block_warps * max(share.values()))


def resident_warps(registers: int, warps_per_block: int, shared_per_block: int) -> int:
    per_warp = math.ceil(registers * 32 / REGISTER_UNIT) * REGISTER_UNIT
    block_registers = per_warp * math.ceil(warps_per_block / WARP_GROUP) * WARP_GROUP
    blocks = min(MAX_BLOCKS, MAX_WARPS // warps_per_block, REGISTERS // block_registers,
                 SHARED_PER_SM // (shared_per_block + SHARED_RESERVED))
    return blocks * warps_per_block


def rates(loop: Loop, strip: int, warps: float, output_share: float, lane_use: float,
          bytes_per_output: int) -> dict[str, float]:
    """Each limit's output rate over the copy's: the issue, each pipe, the load/store path, the
    barrier phases (a loop with barriers), latency (Little's law) and DRAM. `warps`: resident per
    SM; `output_share`: the share of a unit's warps that own outputs; `lane_use`: the share of
    their samples that are outputs."""
    copy = COPY_BYTES_PER_S / bytes_per_output
    per_iteration = loop.outputs * 32 * output_share * lane_use  # outputs of one warp's iteration
    clocks = resource_clocks(loop.instructions, loop.pipes, loop.wavefronts)
    out = {name: SMS * CLOCK_HZ * per_iteration / c / copy for name, c in clocks.items()}
    if loop.phases:  # a block iteration per sum of its phases, for each resident block
        out["barriers"] = SMS * CLOCK_HZ * per_iteration * warps / sum(loop.phases) / copy
    per_plane = strip * 32 * output_share * lane_use
    out["latency"] = SMS * warps * loop.planes_in_flight / DRAM_LATENCY_S * per_plane / copy
    out["DRAM"] = 1.0
    return out


def binding(limits: dict[str, float]) -> tuple[str, float]:
    name = min(limits, key=limits.get)
    return name, min(1.0, limits[name])


def waves(blocks: int, blocks_per_sm: int) -> tuple[int, float]:
    """The grid's waves over SMS x blocks_per_sm slots, and the share of their slots it fills."""
    count = math.ceil(blocks / (blocks_per_sm * SMS))
    return count, blocks / (count * blocks_per_sm * SMS)


def ramp_use(fraction: float, waves: int, moved_bytes: float) -> float:
    """The share of a run left to the march when every wave ramps up and down by a DRAM latency at
    each end (see the docstring), beside moved_bytes at `fraction` of copy bandwidth."""
    busy = moved_bytes / (fraction * COPY_BYTES_PER_S)
    return busy / (busy + 2 * waves * DRAM_LATENCY_S)


def at_shape(loop: Loop, registers: int, direction: str, dtype: str, shape: tuple[int, ...],
             bytes_per_output: int) -> dict:
    """The model at one shape: the launch make_march_geometry() makes for it."""
    layout = launch(shape, dtype, direction == "backward")
    block_warps = layout["threads"] // 32
    blocks_per_sm = resident_warps(registers, block_warps, layout["shared_bytes"]) // block_warps
    per_sm = blocks_per_sm * block_warps // layout["unit_warps"]  # units
    g = launch(shape, dtype, direction == "backward", resident_units=per_sm * SMS)
    carried = g["row_groups"] * g["spans"] * output_warps(g) * 32 * g["strip"]  # samples per plane
    lane_use = g["inner"] * g["middle"] / carried
    segment_use = g["segment"] / (g["segment"] + g["extra_planes"])
    wave_count, wave_use = waves(g["blocks"], blocks_per_sm)
    warps = min(per_sm, g["units"] / SMS) * g["unit_warps"]
    limits = rates(loop, g["strip"], warps, output_warps(g) / g["unit_warps"], lane_use * segment_use * wave_use,
                   bytes_per_output)
    name, fraction = binding(limits)
    ramp = ramp_use(fraction, wave_count, math.prod(shape) * bytes_per_output)
    return {"fraction": fraction * ramp, "binding": name, "lane_use": lane_use, "segment_use": segment_use,
            "waves": wave_count, "wave_use": wave_use, "ramp_use": ramp, "resident_warps": warps,
            "segment": g["segment"], "units": g["units"]}
