"""Static performance model of the CUDA kernels, read from their sm_90 code: needs nvcc, not a GPU.

    python scripts/kernel_report.py [--json PATH]

It builds the CUDA library exactly as the product does (`ops.library.build_cuda_library`, cached
like every build) and reads every kernel instantiation (2D/3D x forward/backward x float32,
float16, bfloat16, float64, each with whole-vector loads and in the general form with clamped
sample loads) with `cuobjdump` (CUDA toolkit, or the copy triton ships):

- `-res-usage`: registers, stack frame, local memory (spills), static shared memory.
- `-sass`: the march's steady-state loop (the backward branch whose body stores to global memory
  with the fewest instructions per stored byte), each instruction counted once, both sides of a
  branch included. The launch geometry comes from the kernels' own code (the test-only op
  `segnet_ops::_march_launch`, which calls make_march_geometry() and split_outer_axis()).

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
      wavefronts (sector-wise, whatever the access width), an asynchronous copy to shared memory
      (LDGSTS) that and its write; a shared access takes the wavefronts of its bank pattern (32
      banks of 4 bytes; 8- and 16-byte accesses run in half- and quarter-warp phases), from the
      layout's lane stride; a shuffle takes one.

A warp's loop iteration therefore costs an SM max(instructions / 4, each pipe's count / its rate)
clocks, and produces outputs_per_iteration x 32 outputs (x the unit's warps with outputs over its
warps in the 3D backward pass, whose two halo warps per unit run the loop without outputs of
their own).

Resident warps per SM: 64 at most, 32 blocks, 65,536 registers allocated per warp in units of
256 (registers per lane rounded up to 8) and per block in groups of 4 warps, 228 KB of shared
memory of which each block reserves 1 KB beside its own.

Latency (Little's law): a load must return before the instruction that first reads it. Each
LDG of the loop is issued some instructions before its first use (cyclically through the loop),
and each group of asynchronous copies (LDGSTS ... LDGDEPBAR) before the DEPBAR that waits for
it; the smallest such lead, in planes (loop instructions / planes per iteration), is how many
planes ahead the warp loads, d (a move of a loaded register counts as its use: it waits). With
a DRAM latency L under load of 600 ns (unloaded pointer chasing measures 270-480 ns on Hopper;
a stream near peak bandwidth queues longer), a warp can march at most d / L planes per second,
so an SM at most resident_warps x d / L.

DRAM: a device-to-device copy reaches 4.3e12 B/s (scripts/gpu_check.sh measures it); the op
moves 2 (forward: x in, y out) or 3 (backward: x, grad_y, grad_x) tensors; halo rows and the
planes around a segment's ends are assumed to hit L2.

The modeled fraction of copy bandwidth is the smallest of the issue/pipe, latency and DRAM
rates over the DRAM rate, capped at 1. "At the model's best geometry" every lane owns outputs
and segments are long; at a shape, the launch that make_march_geometry() makes for it (aligned
data, whole-vector kernel; its segments split for the kernel's resident units on the H200, as the
CUDA launcher splits them for the device it runs on) scales every rate but DRAM's by its
lane use (owned samples over the samples its lanes carry: span overlap, rows shorter than a
warp's strips and not packed, halo row groups past the volume) and its segment overhead
(segment / (segment + extra_planes): forward 2, the planes primed before the first output;
backward 4, two primed and two marched beyond its own outputs; priming counted as whole steps),
limits the resident warps to those the launch has, and counts the last wave's empty slots. It
is a ceiling, not a promise; scripts/gpu_check.sh measures the kernels where a GPU is lent.
"""

from __future__ import annotations

import argparse
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
GLOBAL_ACCESS = {"LDG", "STG", "LDGSTS"}
SHARED_ACCESS = {"LDS", "STS"}

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
OPCODE = re.compile(r"^(?:@!?U?P[\dT]\s+)?([A-Z0-9_]+)((?:\.[A-Z0-9_]+)*)")
REGISTER = re.compile(r"\bR(\d+)\b")


def floor(ndim: int, direction: str, dtype: str, at_shape: bool) -> float:
    """The lowest acceptable modeled fraction of a float32 or 16-bit whole-vector kernel: 0.8
    (forward) / 0.6 (backward) at the model's best geometry, 0.6 / 0.45 at the benchmark shapes;
    the 16-bit 3D backward pass 0.45 at its best (at float32's instructions per sample it moves
    half the bytes)."""
    if at_shape:
        return 0.6 if direction == "forward" else 0.45
    if (ndim, direction) == (3, "backward") and dtype in ("float16", "bfloat16"):
        return 0.45
    return 0.8 if direction == "forward" else 0.6


@dataclass
class Loop:
    instructions: int
    outputs: float  # per lane and iteration
    pipes: dict[str, int]
    wavefronts: float  # of the load/store path, per warp and iteration
    lead_planes: float  # how many planes ahead the loop's global loads are issued (d)


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
    lead_planes: float
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


def registers_of(operands: str, data_width: int = 4) -> set[int]:
    """The 32-bit registers an operand list names: an address `R2.64` spans 2, and the data
    operand of a wide load or store (the first of a load, the last of a store) data_width / 4."""
    tokens = [t.strip() for t in operands.split(",")]
    found = set()
    for position, token in enumerate(tokens):
        for r in REGISTER.finditer(token):
            wide = token[r.end():].startswith(".64")
            data = position in (0, len(tokens) - 1) and "[" not in token
            span = 2 if wide else (max(1, data_width // 4) if data else 1)
            found.update(range(int(r.group(1)), int(r.group(1)) + span))
    return found


def analyse_loop(body: list[str], strip_bytes: int, element: int, shared_lane_stride: int) -> Loop:
    pipes = dict.fromkeys(PIPE_RATES, 0)
    wavefronts = 0.0
    parsed = []
    for op in body:
        match = OPCODE.match(op)
        name, modifiers = match.group(1), match.group(2)
        operands = op[match.end():]
        parsed.append((name, modifiers, operands))
        pipe = next((p for p, names in PIPES.items() if name in names), None)
        if pipe:
            pipes[pipe] += 1
        if name in GLOBAL_ACCESS:
            wavefronts += 32 * strip_bytes / WAVEFRONT_BYTES
            if name == "LDGSTS":  # and the write into shared memory, lanes' strips side by side
                wavefronts += shared_wavefronts(access_bytes(modifiers), access_bytes(modifiers))
        elif name in SHARED_ACCESS:
            wavefronts += shared_wavefronts(access_bytes(modifiers), shared_lane_stride)
        elif name in ("SHFL", "LDC"):
            wavefronts += 1
    stored = sum(access_bytes(m) for n, m, _ in parsed if n == "STG")
    outputs = stored / element
    planes = outputs / (strip_bytes // element)
    leads = load_leads(parsed) + copy_leads(parsed)
    lead_planes = min(leads) / (len(body) / planes) if leads else 1.0
    return Loop(len(body), outputs, pipes, wavefronts, lead_planes)


def load_leads(parsed: list[tuple[str, str, str]]) -> list[int]:
    """Leads of global loads into registers (LDG): the instructions until one reads a register the
    load wrote (cyclically through the loop)."""
    leads = []
    for i, (name, modifiers, operands) in enumerate(parsed):
        if name != "LDG":
            continue
        written = registers_of(operands.split(",")[0], access_bytes(modifiers))
        for k in range(1, len(parsed) + 1):
            later_name, later_modifiers, later_operands = parsed[(i + k) % len(parsed)]
            stores = later_name in ("STG", "STS")
            sources = later_operands if stores else later_operands.partition(",")[2]
            if registers_of(sources, access_bytes(later_modifiers) if stores else 4) & written:
                leads.append(k)
                break
    return leads


def copy_leads(parsed: list[tuple[str, str, str]]) -> list[int]:
    """Leads of asynchronous copies (LDGSTS into shared memory): a wait `DEPBAR.LE SB0, N` lets the
    N most recent groups (closed by LDGDEPBAR) stay in flight, so the group it waits for was
    closed at the (N + 1)-th LDGDEPBAR before it; the lead is the instructions in between
    (cyclically through the loop)."""
    leads = []
    size = len(parsed)
    for i, (name, modifiers, operands) in enumerate(parsed):
        if name != "DEPBAR" or ".LE" not in modifiers:
            continue
        pending = int(operands.split(",")[-1].strip(), 0)
        commits = 0
        for k in range(1, size + 1):
            if parsed[(i - k) % size][0] == "LDGDEPBAR":
                commits += 1
                if commits == pending + 1:
                    leads.append(k)
                    break
    return leads


def march_loop(sass: str, strip_bytes: int, element: int, shared_lane_stride: int) -> Loop:
    """The march: among loops whose body stores to global memory, the one with the fewest
    instructions per stored byte."""
    code = [(int(a, 16), op) for a, op in INSTRUCTION.findall(sass)]
    best = None
    for address, op in code:
        latch = LATCH.search(op)
        if not latch or int(latch.group(1), 16) > address:
            continue
        body = [o for a, o in code if int(latch.group(1), 16) <= a <= address]
        stored = sum(access_bytes(m.group(2)) for m in map(OPCODE.match, body) if m.group(1) == "STG")
        if stored and (best is None or len(body) * best[1] < best[0] * stored):
            best = (len(body), stored, body)
    if best is None:
        raise SystemExit("no loop that stores to global memory found: has the march changed shape?")
    return analyse_loop(best[2], strip_bytes, element, shared_lane_stride)


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
    """Each limit's output rate over the copy's: the issue, each pipe, the load/store path, latency
    (Little's law) and DRAM. `output_share`: the share of a unit's warps that own outputs;
    `lane_use`: the share of their samples that are outputs."""
    copy = COPY_BYTES_PER_S / bytes_per_output
    per_iteration = loop.outputs * 32 * output_share * lane_use  # outputs of one warp's iteration
    clocks = {"issue": loop.instructions / ISSUE_PER_CLOCK, "load/store": loop.wavefronts}
    clocks |= {pipe: count / (PIPE_RATES[pipe] / 32) for pipe, count in loop.pipes.items() if count}
    out = {name: SMS * CLOCK_HZ * per_iteration / c / copy for name, c in clocks.items()}
    per_plane = strip * 32 * output_share * lane_use
    out["latency"] = SMS * warps * loop.lead_planes / DRAM_LATENCY_S * per_plane / copy
    out["DRAM"] = 1.0
    return out


def binding(limits: dict[str, float]) -> tuple[str, float]:
    name = min(limits, key=limits.get)
    return name, min(1.0, limits[name])


def output_warps(g: dict[str, int]) -> int:
    """The warps of a unit that own outputs: all but the 3D backward pass's two halo rows."""
    return g["rows_per_unit"] // g["rows_per_warp"]


def at_shape(loop: Loop, registers: int, direction: str, dtype: str, shape: tuple[int, ...],
             bytes_per_output: int) -> dict:
    """The model at one shape: the launch make_march_geometry() makes for it."""
    layout = launch(shape, dtype, direction == "backward")
    per_sm = resident_warps(registers, layout["threads"] // 32, layout["shared_bytes"]) // layout["unit_warps"]  # units
    g = launch(shape, dtype, direction == "backward", resident_units=per_sm * SMS)
    carried = g["row_groups"] * g["spans"] * output_warps(g) * 32 * g["strip"]  # samples per plane
    lane_use = g["inner"] * g["middle"] / carried
    segment_use = g["segment"] / (g["segment"] + g["extra_planes"])
    waves = math.ceil(g["units"] / (per_sm * SMS))
    wave_use = g["units"] / (waves * per_sm * SMS)
    warps = min(per_sm, g["units"] / SMS) * g["unit_warps"]
    limits = rates(loop, g["strip"], warps, output_warps(g) / g["unit_warps"], lane_use * segment_use * wave_use,
                   bytes_per_output)
    name, fraction = binding(limits)
    return {"fraction": fraction, "binding": name, "lane_use": lane_use, "segment_use": segment_use,
            "wave_use": wave_use, "resident_warps": warps, "segment": g["segment"], "units": g["units"]}


def report(library: Path) -> list[KernelReport]:
    from ops.library import load_cpu_library

    load_cpu_library()  # the test-only op that gives the launch geometry
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
        loop = march_loop(sass[mangled], g["strip"] * size, size, g["shared_lane_stride"])
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
            resident_warps=warps, lead_planes=loop.lead_planes, limits=limits, binding=name, modeled_fraction=fraction,
        )
        if vector:
            for shape in SHAPES:
                if len(shape) == ndim + 2:
                    report_row.at_shapes[str(shape)] = at_shape(loop, res["REG"], direction, dtype, shape, moved)
        rows.append(report_row)
    order = {"float32": 0, "float16": 1, "bfloat16": 2, "float64": 3}
    return sorted(rows, key=lambda r: (r.loads != "vector", r.ndim, r.direction != "forward", order[r.dtype]))


def table(rows: list[KernelReport]) -> str:
    limits = ["issue", "fp32", "imad", "alu", "fp64", "mufu/cvt", "load/store", "latency"]
    lines = [
        "| kernel | registers | stack (B) | shared (B) | warps / SM | loads ahead (planes) | instr. / output | "
        + " | ".join(limits) + " | binding | modeled fraction of copy |",
        "|---|---|---|---|---|---|---|" + "---|" * len(limits) + "---|---|",
    ]
    for r in rows:
        cells = " | ".join(f"{r.limits[k]:.2f}" if k in r.limits else "-" for k in limits)
        lines.append(
            f"| {r.kernel} | {r.registers} | {r.stack} | {r.shared} | {r.resident_warps} | {r.lead_planes:.2f} | "
            f"{r.instructions_per_output:.1f} | {cells} | {r.binding} | {r.modeled_fraction:.2f} |"
        )
    return "\n".join(lines)


def shape_table(rows: list[KernelReport]) -> str:
    lines = ["| kernel | shape | lane use | segment (use) | waves use | warps / SM | binding | modeled fraction |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for shape, at in r.at_shapes.items():
            lines.append(f"| {r.kernel} | {shape} | {at['lane_use']:.2f} | {at['segment']} "
                         f"({at['segment_use']:.2f}) | {at['wave_use']:.2f} | {at['resident_warps']:.0f} "
                         f"| {at['binding']} | {at['fraction']:.2f} |")
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
