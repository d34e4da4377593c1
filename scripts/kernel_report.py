"""Static performance report of the CUDA kernels: needs nvcc, not a GPU.

    python scripts/kernel_report.py [--json PATH]

It builds the CUDA library exactly as the product does (`ops.library.build_cuda_library`, the
library's flags and TORCH_CUDA_ARCH_LIST, cached like every build), then reads the sm_90 code of
every kernel instantiation (2D/3D x forward/backward x float32/float16/bfloat16/float64, each with
whole-vector loads and in the general form with clamped sample loads) with `cuobjdump`, which
ships with the CUDA toolkit and with the triton package that torch installs:

- `cuobjdump -res-usage`: registers, stack frame, local memory (spills), static shared memory
  (sm_90 reserves 1 KB of it per block); the 3D backward kernel adds its dynamic shared rows.
- `cuobjdump -sass`: the machine code. The steady-state loop is the march: a backward branch
  whose body stores to global memory (the loop with the fewest instructions per stored byte, if
  the compiler made several). Its instructions are counted once each, both sides of a branch
  included, and divided by the outputs one iteration stores (bytes stored / element size). In 3D
  backward, where a unit of kBackwardRows output rows runs two halo warps besides, the count is
  scaled by (kBackwardRows + 2) / kBackwardRows.

The model. An H200 issues one warp instruction per scheduler per cycle: 132 SMs x 4 schedulers
x 1.98 GHz = 1.05e12 warp instructions, 3.35e13 thread instructions per second. An output of a
kernel that needs I thread instructions can therefore be produced at most 3.35e13 / I times per
second; memory allows 4.3e12 / B per second, where B is the bytes it must move (forward: read
x, write y; backward: read x and grad_y, write grad_x; halo reads are assumed to hit the caches)
and 4.3 TB/s is what a device-to-device copy reaches. The modeled fraction of copy bandwidth is
the smaller of the two rates over the memory one, capped at 1:

    fraction = min(1, (3.35e13 / I) / (4.3e12 / B))

It assumes every lane of a warp is busy, the loop runs without stalls, and instructions of other
pipes (memory, special functions, float64 arithmetic, which an H200 runs at half the float32
rate) issue at the same rate. It is a ceiling, not a promise: latency
that too few warps in flight cannot hide, lanes idle on short rows, and cache misses on the halo
all lower what a GPU measures (scripts/gpu_check.sh measures it where a GPU is lent).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ISSUE_PER_S = 132 * 4 * 1.98e9 * 32  # thread instructions per second
COPY_BYTES_PER_S = 4.3e12
ARCH = "sm_90"
DTYPES = {
    "float": ("float32", 4), "double": ("float64", 8), "c10::Half": ("float16", 2), "c10::BFloat16": ("bfloat16", 2),
}
# (pass, ndim) -> the lowest acceptable modeled fraction for float32 and 2D 16-bit kernels
THRESHOLDS = {"forward": 0.8, "backward": 0.6}
KERNEL = re.compile(r"(forward|backward)_kernel<(\d), ([\w:]+), \w+, (true|false)>")
INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.+?)\s*;")
# A loop's latch: a conditional branch back (an unconditional branch back is the return from a
# divergent-warp fallback path into the loop, not a loop of its own).
LATCH = re.compile(r"^@!?U?P\d\s+BRA\s+(?:!?U?P\d,\s+)?0x([0-9a-f]+)")
STORE = re.compile(r"\bSTG\.E(?:\.(\d+)|\.U16|\.U8)?")


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
    issue_over_copy: float  # the issue-bound output rate over the copy-bound one, uncapped
    modeled_fraction: float

    @property
    def checked(self) -> bool:
        """Held to the thresholds: whole-vector float32 kernels and 2D 16-bit ones."""
        half_2d = self.ndim == 2 and self.dtype in ("float16", "bfloat16")
        return self.loads == "vector" and (self.dtype == "float32" or half_2d)

    def why_unchecked(self) -> str:
        """Why a kernel below the thresholds is not held to them."""
        if self.loads == "clamped":
            return "the general form, for rows that are not whole vectors or unaligned data: one load per sample"
        if self.dtype == "float64":
            return "float64 is reported only"
        return ("the 3D backward pass keeps 4 samples per lane in 16-bit types (8 took 237 registers, and a stack "
                "frame in its clamped form), so it runs float32's instructions for half the bytes")

    def problems(self) -> list[str]:
        found = []
        if self.spills or self.stack:
            found.append(f"{self.kernel}: {self.spills} bytes of spills, {self.stack} bytes of stack frame")
        if self.checked and self.modeled_fraction < THRESHOLDS[self.direction]:
            found.append(
                f"{self.kernel}: models {self.modeled_fraction:.2f} of copy bandwidth, "
                f"below {THRESHOLDS[self.direction]} ({self.instructions_per_output:.1f} instructions per output)"
            )
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


def store_bytes(op: str) -> int:
    match = STORE.search(op)
    if not match:
        return 0
    if match.group(1):
        return int(match.group(1)) // 8
    return 2 if ".U16" in op else (1 if ".U8" in op else 4)


def march_loop(sass: str, element_bytes: int) -> tuple[int, float]:
    """(instructions, outputs) of the march: among loops whose body stores to global memory, the
    one with the fewest instructions per stored byte."""
    code = [(int(a, 16), op) for a, op in INSTRUCTION.findall(sass)]
    best = None
    for address, op in code:
        latch = LATCH.search(op)
        if not latch or int(latch.group(1), 16) > address:
            continue
        body = [o for a, o in code if int(latch.group(1), 16) <= a <= address]
        stored = sum(store_bytes(o) for o in body)
        if stored and (best is None or len(body) * best[1] < best[0] * stored):
            best = (len(body), stored)
    if best is None:
        raise SystemExit("no loop that stores to global memory found: has the march changed shape?")
    return best[0], best[1] / element_bytes


def backward_rows() -> int:
    """Output rows of a 3D backward unit, which has one halo warp more on each side (geometry.h)."""
    header = (ROOT / "csrc" / "march" / "geometry.h").read_text()
    return int(re.search(r"kBackwardRows = (\d+)", header).group(1))


def warps_per_output_row(ndim: int, direction: str) -> float:
    """Warps that run the loop for each row of outputs: the 3D backward halo rows run it too."""
    return (backward_rows() + 2) / backward_rows() if (ndim, direction) == (3, "backward") else 1.0


def dynamic_shared(ndim: int, direction: str, element: str) -> int:
    """The 3D backward unit's rows of u in shared memory (csrc/march/geometry.h)."""
    if not (ndim == 3 and direction == "backward"):
        return 0
    rows = backward_rows()
    size = DTYPES[element][1]
    strip = 16 // size if size >= 4 else 4  # strip_width(): four 16-bit samples in 3D backward
    acc = 8 if element == "double" else 4
    return (rows + 2) * 3 * 32 * strip * acc


def report(library: Path) -> list[KernelReport]:
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
        instructions, outputs = march_loop(sass[mangled], size)
        per_output = instructions / outputs * warps_per_output_row(ndim, direction)
        moved = size * (2 if direction == "forward" else 3)
        res = usage[mangled]
        headroom = (ISSUE_PER_S / per_output) / (COPY_BYTES_PER_S / moved)
        rows.append(
            KernelReport(
                kernel=f"{ndim}D {direction} {dtype}{'' if vector else ' (clamped loads)'}",
                ndim=ndim,
                direction=direction,
                dtype=dtype,
                loads="vector" if vector else "clamped",
                registers=res["REG"],
                stack=res["STACK"],
                spills=res["LOCAL"],
                shared=res["SHARED"] + dynamic_shared(ndim, direction, element),
                loop_instructions=instructions,
                outputs_per_iteration=outputs,
                instructions_per_output=per_output,
                bytes_per_output=moved,
                issue_over_copy=headroom,
                modeled_fraction=min(1.0, headroom),
            )
        )
    order = {"float32": 0, "float16": 1, "bfloat16": 2, "float64": 3}
    return sorted(rows, key=lambda r: (r.loads != "vector", r.ndim, r.direction != "forward", order[r.dtype]))


def table(rows: list[KernelReport]) -> str:
    lines = [
        "| kernel | registers | spills (B) | stack (B) | shared (B) | loop instr. | outputs / iter. | instr. / output "
        "| bytes / output | issue rate / copy rate | modeled fraction of copy |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.kernel} | {r.registers} | {r.spills} | {r.stack} | {r.shared} | {r.loop_instructions} | "
            f"{r.outputs_per_iteration:g} | {r.instructions_per_output:.1f} | {r.bytes_per_output} | "
            f"{r.issue_over_copy:.2f} | {r.modeled_fraction:.2f} |"
        )
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
    print(table(rows))
    print("\nThe modeled fraction is a ceiling, not a promise (see this script's docstring).")
    for r in rows:
        if not r.checked and r.modeled_fraction < THRESHOLDS[r.direction]:
            print(f"- {r.kernel} ({r.modeled_fraction:.2f}): {r.why_unchecked()}")
    problems = [p for r in rows for p in r.problems()]
    for problem in problems:
        print(f"FAIL {problem}")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) | {"checked": r.checked} for r in rows], indent=1))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
