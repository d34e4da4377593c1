"""Static performance model of the CUDA kernels, read from their sm_90 code: needs nvcc, not a GPU.

    python scripts/kernel_report.py [--json PATH]

It builds the CUDA library exactly as the product does (`ops.library.build_cuda_library`, cached
like every build) and reads every kernel instantiation (2D/3D x forward/backward x float32,
float16, bfloat16, float64, each with whole-vector loads and in the general form with clamped
sample loads) with `cuobjdump` (CUDA toolkit, or the copy triton ships):

- `-res-usage`: registers, stack frame, local memory (spills), static shared memory.
- `-sass`: the march's steady-state loop (the backward branch whose body stores to global memory
  with the fewest executed instructions per stored byte), each instruction counted once, both
  sides of a branch included. An instruction predicated on `@!PT` is never executed and counts
  nowhere: PT is the predicate that is always true, so !PT is always false (ptxas emits such
  filler, e.g. `@!PT LDS RZ, [RZ]` beside asynchronous copies). The launch geometry comes from
  the kernels' own code (the test-only op `segnet_ops::_march_launch`, which calls
  make_march_geometry() and split_outer_axis()).

The model: an H200 (sm_90) at 1.98 GHz with 132 SMs. Per SM and clock (CUDA C++ Programming
Guide, "Arithmetic Instructions", compute capability 9.0, in thread operations):

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

import argparse
import itertools
import json
import math
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

ARCH = "sm_90"

# The H200 (see the docstring).
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
    "fp64": {"DADD", "DMUL", "DFMA", "DSETP", "DMNMX", "DSET"},
    "mufu/cvt": {"MUFU", "F2F", "F2I", "I2F", "F2FP", "I2FP", "FRND", "I2I", "POPC", "FLO", "BREV"},
}
# Result latencies in clocks, for the latency chain of a barrier phase (see the docstring).
PIPE_LATENCY = {"fp32": 4, "imad": 4, "alu": 4, "fp64": 8, "mufu/cvt": 16}
SHARED_PATH_LOADS, SHARED_PATH_LATENCY = {"LDS", "SHFL", "LDC"}, 30
GLOBAL_ACCESS = {"LDG", "STG"}
SHARED_ACCESS = {"LDS", "STS"}
LOADS = {"LDG", "LDS", "LDC"}
# Instructions that write no register: every register they name is read.
NO_DESTINATION = {"STG", "STS", "LDGSTS", "RED", "BAR", "BRA", "BSSY", "BSYNC", "WARPSYNC", "DEPBAR", "LDGDEPBAR",
                  "EXIT", "NOP"}

DTYPES = {
    "float": ("float32", 4), "double": ("float64", 8), "c10::Half": ("float16", 2), "c10::BFloat16": ("bfloat16", 2),
}
# scripts/bench_op.py's CUDA shapes and a 3D U-Net's skip connection.
SHAPES = [(16, 32, 256, 256), (8, 32, 256, 256), (2, 16, 64, 96, 96), (2, 32, 128, 128, 128)]
LAUNCH_FIELDS = ("outer", "middle", "inner", "strip", "spans", "row_lanes", "rows_per_warp", "rows_per_unit",
                 "row_groups", "segment", "segments", "extra_planes", "unit_warps", "units", "blocks", "threads",
                 "shared_bytes", "shared_lane_stride")

KERNEL = re.compile(r"(forward|backward)_kernel<(\d), ([\w:]+), \w+, (true|false)>")
INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.+?)\s*;")
# A loop's latch: a conditional branch back (an unconditional branch back is the return from a
# divergent-warp fallback path into the loop, not a loop of its own).
LATCH = re.compile(r"^@!?U?P\d\s+BRA\s+(?:!?U?P\d,\s+)?0x([0-9a-f]+)")
GUARD = re.compile(r"^@(!?)(U?P[\dT])\s+")
OPCODE = re.compile(r"([A-Z0-9_]+)((?:\.[A-Z0-9_]+)*)")
# A general-purpose register (R<n>, an address `R2.64` naming a pair) or a predicate (P<n>); RZ,
# PT and the uniform registers (UR<n>, UP<n>) hold the same value across a warp's loop steps.
REGISTER = re.compile(r"\b([RP])(\d+)\b(\.64)?")
PREDICATE = re.compile(r"U?P[\dT]")


def floor(ndim: int, direction: str, dtype: str, at_shape: bool) -> float:
    """The lowest acceptable modeled fraction of a float32 or 16-bit whole-vector kernel: 0.8
    (forward) / 0.6 (backward) at the model's best geometry, 0.6 / 0.45 at the benchmark shapes.
    The 16-bit 3D backward pass accumulates in float32 like the float32 one, so it runs float32's
    barrier phases with conversions added and moves half the bytes in them: 0.4 at its best and
    0.22 at the shapes, a little below what the model gives it."""
    if (ndim, direction) == (3, "backward") and dtype in ("float16", "bfloat16"):
        return 0.22 if at_shape else 0.4
    if at_shape:
        return 0.6 if direction == "forward" else 0.45
    return 0.8 if direction == "forward" else 0.6


@dataclass(frozen=True)
class Instruction:
    name: str
    modifiers: str
    operands: str
    pipe: str | None
    wavefronts: float  # of the load/store path, per warp
    reads: frozenset[str]
    writes: frozenset[str]
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


@dataclass
class KernelReport:
    kernel: str
    ndim: int
    direction: str
    dtype: str
    loads: str
    registers: int
    stack: int
    spills: int
    shared: int
    loop_instructions: int
    outputs_per_iteration: float
    instructions_per_output: float
    bytes_per_output: int
    resident_warps: int
    planes_in_flight: float
    limits: dict[str, float]  # each limit's output rate over the copy's, at the model's best geometry
    binding: str
    modeled_fraction: float
    at_shapes: dict[str, dict] = field(default_factory=dict)

    @property
    def checked(self) -> bool:
        """Held to the thresholds: whole-vector float32 and 16-bit kernels."""
        return self.loads == "vector" and self.dtype != "float64"

    def problems(self) -> list[str]:
        found = []
        if self.spills or self.stack:
            found.append(f"{self.kernel}: {self.spills} bytes of spills, {self.stack} bytes of stack frame")
        if not self.checked:
            return found
        best = floor(self.ndim, self.direction, self.dtype, at_shape=False)
        if self.modeled_fraction < best:
            found.append(f"{self.kernel}: models {self.modeled_fraction:.2f} of copy bandwidth, below {best} "
                         f"(bound by {self.binding})")
        at_shapes = floor(self.ndim, self.direction, self.dtype, at_shape=True)
        for shape, at in self.at_shapes.items():
            if at["fraction"] < at_shapes:
                found.append(f"{self.kernel} at {shape}: models {at['fraction']:.2f}, below {at_shapes} "
                             f"(bound by {at['binding']})")
        return found


def cuobjdump() -> str:
    """cuobjdump from the CUDA toolkit, else the one triton ships."""
    toolkit = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "cuobjdump")
    if toolkit.exists():
        return str(toolkit)
    import triton

    shipped = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not shipped.exists():
        raise SystemExit("cuobjdump not found: install the CUDA toolkit's cuobjdump or triton")
    return str(shipped)


def demangle(names: list[str]) -> list[str]:
    """The readable name of each of `names`, in order (c++filt writes one line per line it reads)."""
    done = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def functions(text: str, marker: str) -> dict[str, str]:
    """Split cuobjdump output into {mangled function name: its text}."""
    parts = re.split(rf"\s*{marker}\s*:?\s*(\S+?):?\s*\n", text)
    return dict(zip(parts[1::2], parts[2::2], strict=True))  # [before, name, text, name, text, ...]


def resource_usage(library: Path) -> dict[str, dict[str, int]]:
    out = subprocess.run([cuobjdump(), "-res-usage", "-arch", ARCH, str(library)], capture_output=True, text=True,
                         check=True).stdout
    usage = {}
    for name, fields in re.findall(r"Function (\S+):\s*\n\s*(.+)", out):
        usage[name] = {k: int(v) for k, v in re.findall(r"(\w+)(?:\[\d\])?:(\d+)", fields)}
    return usage


def access_bytes(modifiers: str, default: int = 4) -> int:
    """Bytes per lane of a load or store from its modifiers (.64, .128, .U16, .U8, ...)."""
    for bits, size in ((".128", 16), (".64", 8), (".U16", 2), (".S16", 2), (".U8", 1), (".S8", 1)):
        if bits in modifiers + ".":
            return size
    return default


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


def registers(operands: str, width: int = 4) -> set[str]:
    """The registers comma-separated operands name: R<n> for each 32-bit register (in an address
    `[...]` one, or two for `R2.64`; a value of `width` bytes width / 4 from R<n> on) and P<n>."""
    found = set()
    for token in operands.split(","):
        for kind, number, pair in REGISTER.findall(token):
            span = 1 if kind == "P" else 2 if pair else 1 if "[" in token else max(1, width // 4)
            found.update(f"{kind}{int(number) + k}" for k in range(span))
    return found


def reads_and_writes(name: str, modifiers: str, operands: str) -> tuple[set[str], set[str]]:
    """The registers an instruction reads and writes. A store's value and a load's destination
    take the access width; a 64-bit instruction's operands are register pairs. An instruction whose
    first operand is a predicate (a compare, like PTX's setp p|q, or a shuffle's in-range flag)
    writes the second too; an add or address computation writes the carry-out predicates right
    after its first."""
    if name in NO_DESTINATION:
        return registers(operands, access_bytes(modifiers)), set()
    tokens = [t.strip() for t in operands.split(",")]
    wide = 8 if name in PIPES["fp64"] or ".F64" in modifiers else 4
    width = access_bytes(modifiers) if name in LOADS else 8 if ".WIDE" in modifiers else wide
    if PREDICATE.fullmatch(tokens[0]):
        written, rest = tokens[:2], tokens[2:]
    else:
        written, rest = tokens[:1], tokens[1:]
        while rest and PREDICATE.fullmatch(rest[0]):
            written.append(rest.pop(0))
    return registers(",".join(rest), wide), registers(written[0], width) | registers(",".join(written[1:]))


def wavefronts_of(name: str, modifiers: str, strip_bytes: int, shared_lane_stride: int) -> float:
    if name in GLOBAL_ACCESS:
        return 32 * strip_bytes / WAVEFRONT_BYTES
    if name == "LDGSTS":
        # cp.async (CUDA C++ Programming Guide, "Asynchronous Data Copies"; in SASS LDGSTS, the
        # asynchronous global-to-shared copy of the CUDA Binary Utilities' instruction set
        # reference) moves global memory into shared memory without a register: one global load,
        # whose bytes the DRAM model counts, and one write into shared memory by the copy unit,
        # which is all it takes on the path (lanes' strips side by side).
        return shared_wavefronts(access_bytes(modifiers), access_bytes(modifiers))
    if name in SHARED_ACCESS:
        return shared_wavefronts(access_bytes(modifiers), shared_lane_stride)
    return 1 if name in ("SHFL", "LDC") else 0


def result_latency(name: str, pipe: str | None) -> int:
    if name == "LDG":
        return 0  # its DRAM latency is the latency limit's (Little's law)
    return SHARED_PATH_LATENCY if name in SHARED_PATH_LOADS else PIPE_LATENCY.get(pipe, 4)


def parse(op: str, strip_bytes: int, shared_lane_stride: int) -> Instruction | None:
    """One SASS instruction, or None if it never executes."""
    guard = GUARD.match(op)
    if guard and guard.groups() == ("!", "PT"):
        # PT is the predicate that is always true (nvdisasm's SASS), so @!PT never holds: ptxas
        # emits such filler (`@!PT LDS RZ, [RZ]` beside asynchronous copies) and no pipe sees it.
        return None
    text = op[guard.end():] if guard else op
    match = OPCODE.match(text)
    name, modifiers, operands = match.group(1), match.group(2), text[match.end():]
    pipe = next((p for p, names in PIPES.items() if name in names), None)
    reads, writes = reads_and_writes(name, modifiers, operands)
    if guard:
        reads |= registers(guard.group(2))
    return Instruction(name, modifiers, operands, pipe, wavefronts_of(name, modifiers, strip_bytes, shared_lane_stride),
                       frozenset(reads), frozenset(writes), result_latency(name, pipe))


def executed(body: list[str], strip_bytes: int, shared_lane_stride: int) -> list[Instruction]:
    """The instructions of `body` that execute, parsed."""
    return [i for i in (parse(op, strip_bytes, shared_lane_stride) for op in body) if i is not None]


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
    stored = sum(access_bytes(i.modifiers) for i in code if i.name == "STG")
    outputs = stored / element
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


def march_loop(sass: str, strip_bytes: int, element: int, shared_lane_stride: int, block_warps: int) -> Loop:
    """The march: among loops whose body stores to global memory, the one with the fewest executed
    instructions per stored byte."""
    code = [(int(a, 16), op) for a, op in INSTRUCTION.findall(sass)]
    best = None
    for address, op in code:
        latch = LATCH.search(op)
        if not latch or int(latch.group(1), 16) > address:
            continue
        body = executed([o for a, o in code if int(latch.group(1), 16) <= a <= address], strip_bytes,
                        shared_lane_stride)
        stored = sum(access_bytes(i.modifiers) for i in body if i.name == "STG")
        if stored and (best is None or len(body) * best[1] < len(best[0]) * stored):
            best = (body, stored)
    if best is None:
        raise SystemExit("no loop that stores to global memory found: has the march changed shape?")
    return analyse_loop(best[0], strip_bytes, element, block_warps)


def resident_warps(registers: int, warps_per_block: int, shared_per_block: int) -> int:
    per_warp = math.ceil(registers * 32 / REGISTER_UNIT) * REGISTER_UNIT
    block_registers = per_warp * math.ceil(warps_per_block / WARP_GROUP) * WARP_GROUP
    blocks = min(MAX_BLOCKS, MAX_WARPS // warps_per_block, REGISTERS // block_registers,
                 SHARED_PER_SM // (shared_per_block + SHARED_RESERVED))
    return blocks * warps_per_block


def launch(shape: tuple[int, ...], dtype: str, backward: bool, vector: bool = True,
           resident_units: int = 1) -> dict[str, int]:
    """The kernels' launch geometry for `shape` (make_march_geometry() and split_outer_axis(),
    through the test-only op): of the whole-vector kernel, or of the general form, on a device
    that runs `resident_units` of its units at a time (only the segments depend on it)."""
    import torch

    values = torch.ops.segnet_ops._march_launch(list(shape), getattr(torch, dtype), backward, vector, resident_units)
    return dict(zip(LAUNCH_FIELDS, values, strict=True))


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


def output_warps(g: dict[str, int]) -> int:
    """The warps of a unit that own outputs: all but the 3D backward pass's two halo rows."""
    return g["rows_per_unit"] // g["rows_per_warp"]


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


def report(library: Path) -> list[KernelReport]:
    import ops.library

    ops.library.load("cpu")  # the test-only op that gives the launch geometry
    usage = resource_usage(library)
    dump = subprocess.run([cuobjdump(), "-sass", "-arch", ARCH, str(library)], capture_output=True, text=True,
                          check=True).stdout
    sass = functions(dump, "Function")
    names = list(sass)
    rows = []
    for mangled, readable in zip(names, demangle(names), strict=True):
        match = KERNEL.search(readable)
        if not match:
            continue  # the channel sum: one block per channel, not a march
        direction, ndim, element, vector = match.group(1), int(match.group(2)), match.group(3), match.group(4) == "true"
        dtype, size = DTYPES[element]
        # the geometry of a shape every strip fits: the strip width, unit and shared layout
        g = launch((1, 1, 64, 64, 256)[: ndim + 2], dtype, direction == "backward", vector)
        loop = march_loop(sass[mangled], g["strip"] * size, size, g["shared_lane_stride"], g["threads"] // 32)
        res = usage[mangled]
        moved = size * (2 if direction == "forward" else 3)
        share = output_warps(g) / g["unit_warps"]
        warps = resident_warps(res["REG"], g["threads"] // 32, g["shared_bytes"])
        limits = rates(loop, g["strip"], warps, share, 1.0, moved)
        name, fraction = binding(limits)
        report_row = KernelReport(
            kernel=f"{ndim}D {direction} {dtype}{'' if vector else ' (clamped loads)'}",
            ndim=ndim, direction=direction, dtype=dtype, loads="vector" if vector else "clamped",
            registers=res["REG"], stack=res["STACK"], spills=res["LOCAL"], shared=res["SHARED"] + g["shared_bytes"],
            loop_instructions=loop.instructions, outputs_per_iteration=loop.outputs,
            instructions_per_output=loop.instructions / (loop.outputs * share), bytes_per_output=moved,
            resident_warps=warps, planes_in_flight=loop.planes_in_flight, limits=limits, binding=name,
            modeled_fraction=fraction,
        )
        if vector:
            for shape in SHAPES:
                if len(shape) == ndim + 2:
                    report_row.at_shapes[str(shape)] = at_shape(loop, res["REG"], direction, dtype, shape, moved)
        rows.append(report_row)
    order = {"float32": 0, "float16": 1, "bfloat16": 2, "float64": 3}
    return sorted(rows, key=lambda r: (r.loads != "vector", r.ndim, r.direction != "forward", order[r.dtype]))


def table(rows: list[KernelReport]) -> str:
    limits = ["issue", "fp32", "imad", "alu", "fp64", "mufu/cvt", "load/store", "barriers", "latency"]
    lines = [
        "| kernel | registers | stack (B) | shared (B) | warps / SM | planes in flight | instr. / output | "
        + " | ".join(limits) + " | binding | modeled fraction of copy |",
        "|---|---|---|---|---|---|---|" + "---|" * len(limits) + "---|---|",
    ]
    for r in rows:
        cells = " | ".join(f"{r.limits[k]:.2f}" if k in r.limits else "-" for k in limits)
        lines.append(
            f"| {r.kernel} | {r.registers} | {r.stack} | {r.shared} | {r.resident_warps} | {r.planes_in_flight:.2f} | "
            f"{r.instructions_per_output:.1f} | {cells} | {r.binding} | {r.modeled_fraction:.2f} |"
        )
    return "\n".join(lines)


def shape_table(rows: list[KernelReport]) -> str:
    lines = ["| kernel | shape | lane use | segment (use) | waves (use) | ramp use | warps / SM | binding | "
             "modeled fraction |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for shape, at in r.at_shapes.items():
            lines.append(f"| {r.kernel} | {shape} | {at['lane_use']:.2f} | {at['segment']} "
                         f"({at['segment_use']:.2f}) | {at['waves']} ({at['wave_use']:.2f}) | {at['ramp_use']:.2f} "
                         f"| {at['resident_warps']:.0f} | {at['binding']} | {at['fraction']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    from ops.library import OpsBuildError, build_cuda_library

    try:
        library = build_cuda_library().path
    except OpsBuildError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    rows = report(library)
    print(f"sm_90 code of {library}\n")
    print("Each limit's output rate over a copy's, at the model's best geometry:\n")
    print(table(rows))
    print("\nAt the benchmark shapes (scripts/bench_op.py) and a 3D U-Net skip, whole-vector kernels:\n")
    print(shape_table(rows))
    print("\nThe modeled fraction is a ceiling, not a promise (see this script's docstring).")
    problems = [p for r in rows for p in r.problems()]
    for problem in problems:
        print(f"FAIL {problem}")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) | {"checked": r.checked} for r in rows], indent=1))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
