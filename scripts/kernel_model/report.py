"""Static performance model of the CUDA kernels, read from their sm_90 code, and every built
architecture's limits: needs nvcc, not a GPU.

It builds the CUDA library exactly as the product does (`ops.library.build_cuda_library`, cached
like every build) and reads every kernel instantiation (2D/3D x forward/backward x float32,
float16, bfloat16, float64, each with whole-vector loads and in the general form with clamped
sample loads) with `cuobjdump` (CUDA toolkit, or the copy triton ships):

- `-res-usage`: registers, stack frame, local memory (spills), static shared memory.
- `-sass`: the march's steady-state loop (the backward branch whose body stores to global memory
  with the fewest executed instructions per stored byte), each instruction counted once, both
  sides of a branch included, none predicated on `@!PT` (sass.py). The launch geometry comes from
  the kernels' own code (geometry.py).

Each kernel gets the H200 model's limits and modeled fraction of copy bandwidth (h200.py) at the
model's best geometry and, whole-vector kernels, at the SHAPES below; the floors hold the float32
and 16-bit whole-vector kernels to their levels.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import sass
from .architectures import ArchitectureRow, architecture_rows
from .architectures import table as architecture_table
from .geometry import launch, output_warps
from .h200 import ARCH, Loop, analyse_loop, at_shape, binding, executed, rates, resident_warps

DTYPES = {
    "float": ("float32", 4), "double": ("float64", 8), "c10::Half": ("float16", 2), "c10::BFloat16": ("bfloat16", 2),
}
# scripts/bench_op.py's CUDA shapes and a 3D U-Net's skip connection.
SHAPES = [(16, 32, 256, 256), (8, 32, 256, 256), (2, 16, 64, 96, 96), (2, 32, 128, 128, 128)]
KERNEL = re.compile(r"(forward|backward)_kernel<(\d), ([\w:]+), \w+, (true|false)>")


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


def resource_usage(library: Path, arch: str = ARCH) -> dict[str, dict[str, int]]:
    out = subprocess.run([cuobjdump(), "-res-usage", "-arch", arch, str(library)], capture_output=True, text=True,
                         check=True).stdout
    usage = {}
    for name, fields in re.findall(r"Function (\S+):\s*\n\s*(.+)", out):
        usage[name] = {k: int(v) for k, v in re.findall(r"(\w+)(?:\[\d\])?:(\d+)", fields)}
    return usage


def march_loop(function: str, strip_bytes: int, element: int, shared_lane_stride: int, block_warps: int) -> Loop:
    """The march: among loops whose body stores to global memory, the one with the fewest executed
    instructions per stored byte."""
    best = None
    for body in sass.loops(function):
        code = executed(body, strip_bytes, shared_lane_stride)
        stored = sass.stored_bytes(code)
        if stored and (best is None or len(code) * best[1] < len(best[0]) * stored):
            best = (code, stored)
    if best is None:
        raise SystemExit("no loop that stores to global memory found: has the march changed shape?")
    return analyse_loop(best[0], strip_bytes, element, block_warps)


@dataclass(frozen=True)
class MarchKernel:
    direction: str
    ndim: int
    dtype: str
    size: int  # bytes per element
    vector: bool

    @property
    def name(self) -> str:
        return f"{self.ndim}D {self.direction} {self.dtype}{'' if self.vector else ' (clamped loads)'}"

    def geometry(self) -> dict:
        """The launch of a shape every strip fits: the strip width, unit and shared layout."""
        return launch((1, 1, 64, 64, 256)[: self.ndim + 2], self.dtype, self.direction == "backward", self.vector)


def march_kernel(readable: str) -> MarchKernel | None:
    """The march kernel a demangled name instantiates; None for the channel sum (one block per
    channel, not a march)."""
    match = KERNEL.search(readable)
    if not match:
        return None
    dtype, size = DTYPES[match.group(3)]
    return MarchKernel(match.group(1), int(match.group(2)), dtype, size, match.group(4) == "true")


def report(library: Path) -> list[KernelReport]:
    import ops.library

    ops.library.load("cpu")  # the test-only op that gives the launch geometry
    usage = resource_usage(library)
    dump = subprocess.run([cuobjdump(), "-sass", "-arch", ARCH, str(library)], capture_output=True, text=True,
                          check=True).stdout
    functions = sass.functions(dump, "Function")
    names = list(functions)
    rows = []
    for mangled, readable in zip(names, demangle(names), strict=True):
        kernel = march_kernel(readable)
        if kernel is None:
            continue
        direction, ndim, dtype, size, vector = kernel.direction, kernel.ndim, kernel.dtype, kernel.size, kernel.vector
        g = kernel.geometry()
        loop = march_loop(functions[mangled], g["strip"] * size, size, g["shared_lane_stride"], g["threads"] // 32)
        res = usage[mangled]
        moved = size * (2 if direction == "forward" else 3)
        share = output_warps(g) / g["unit_warps"]
        warps = resident_warps(res["REG"], g["threads"] // 32, g["shared_bytes"])
        limits = rates(loop, g["strip"], warps, share, 1.0, moved)
        name, fraction = binding(limits)
        report_row = KernelReport(
            kernel=kernel.name,
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


def architecture_report(library: Path) -> list[ArchitectureRow]:
    """Every native architecture's rows (architectures.py)."""
    import ops.library

    ops.library.load("cpu")  # the test-only op that gives the launch geometry

    def classify(readable: str) -> tuple[str, str, int] | None:
        kernel = march_kernel(readable)
        if kernel is None:
            return None
        return kernel.name, "vector" if kernel.vector else "clamped", kernel.geometry()["shared_bytes"]

    return architecture_rows(cuobjdump(), library, classify, lambda arch: resource_usage(library, arch), demangle)


def modeled_fractions(rows: list[KernelReport]) -> dict[tuple[str, int, str, str], float]:
    """(shape, ndim, direction, dtype) -> the modeled fraction of the whole-vector kernel: at that
    shape where the report models it (its SHAPES), else ("best", ...) at its best geometry."""
    fractions = {}
    for r in (r for r in rows if r.loads == "vector"):
        fractions[("best", r.ndim, r.direction, r.dtype)] = r.modeled_fraction
        for shape, at in r.at_shapes.items():
            fractions[(shape, r.ndim, r.direction, r.dtype)] = at["fraction"]
    return fractions


def modeled(model: dict, shape: tuple[int, ...], direction: str, dtype: str) -> float:
    """The modeled fraction (of modeled_fractions()) that stands beside a measurement at `shape`."""
    ndim = len(shape) - 2
    return model.get((str(shape), ndim, direction, dtype), model.get(("best", ndim, direction, dtype), float("nan")))


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
    architectures = architecture_report(library)
    print(f"sm_90 code of {library}\n")
    print("Each limit's output rate over a copy's, at the model's best geometry:\n")
    print(table(rows))
    print("\nAt the benchmark shapes (scripts/bench_op.py) and a 3D U-Net skip, whole-vector kernels:\n")
    print(shape_table(rows))
    print("\nThe modeled fraction is a ceiling, not a promise (see scripts/kernel_model/h200.py).")
    print("\nEvery architecture the library holds native code for (scripts/kernel_model/architectures.py):\n")
    print(architecture_table(architectures))
    problems = [p for r in rows for p in r.problems()] + [p for r in architectures for p in r.problems()]
    for problem in problems:
        print(f"FAIL {problem}")
    if args.json:
        written = {"sm_90": [asdict(r) | {"checked": r.checked} for r in rows],
                   "architectures": [asdict(r) | {"launched": r.launched} for r in architectures]}
        args.json.write_text(json.dumps(written, indent=1))
    return 1 if problems else 0
