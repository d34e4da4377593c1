"""Every architecture the CUDA library holds native code for, read from that architecture's own
code: what a GPU of it would refuse or pay at run time, found without one.

- registers, stack frame and spills (`cuobjdump -res-usage -arch sm_XY`);
- the largest block's shared memory, static plus the launch's dynamic shared memory (geometry.py),
  against what one block may opt into on that architecture (the CUDA C++ Programming Guide's
  table of compute capabilities: 64 KB on 7.5, 163 KB on 8.0 and 8.7, 99 KB on 8.6, 8.9 and 12.0,
  227 KB on 9.0 and 10.0). A whole-vector kernel over it never launches there: the launcher takes
  the general form (csrc/march/geometry.h), which must fit;
- how the whole-vector strips reach shared memory: asynchronous copies (LDGSTS, cp.async) from 8.0
  on, plain vector loads and shared stores on 7.5, which has no cp.async (csrc/march/strip.h).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from . import sass

KB = 1024
SHARED_OPT_IN = {
    "sm_75": 64 * KB, "sm_80": 163 * KB, "sm_86": 99 * KB, "sm_87": 163 * KB, "sm_89": 99 * KB, "sm_90": 227 * KB,
    "sm_100": 227 * KB, "sm_120": 99 * KB,
}
ASYNC_COPIES_FROM = 80  # cp.async needs compute capability 8.0


@dataclass
class ArchitectureRow:
    arch: str
    kernel: str
    loads: str  # "vector" (staged in shared memory) or "clamped" (sample loads into registers)
    registers: int
    stack: int
    spills: int
    shared: int  # bytes per block at the report's shape: static and dynamic
    shared_limit: int
    async_copies: int  # LDGSTS instructions in the kernel

    @property
    def launched(self) -> bool:
        """False for a whole-vector kernel whose block needs more shared memory than the
        architecture allows: the general form runs in its place."""
        return self.loads != "vector" or self.shared <= self.shared_limit

    def problems(self) -> list[str]:
        at = f"{self.arch} {self.kernel}"
        found = []
        if self.spills or self.stack:
            found.append(f"{at}: {self.spills} bytes of spills, {self.stack} bytes of stack frame")
        if self.loads != "vector" and self.shared > self.shared_limit:
            found.append(f"{at}: a block needs {self.shared} bytes of shared memory, {self.arch} allows "
                         f"{self.shared_limit}")
        capability = int(self.arch.removeprefix("sm_"))
        if capability < ASYNC_COPIES_FROM and self.async_copies:
            found.append(f"{at}: {self.async_copies} cp.async copies on an architecture without cp.async")
        if capability >= ASYNC_COPIES_FROM and self.launched and self.loads == "vector" and not self.async_copies:
            found.append(f"{at}: whole-vector strips staged without cp.async")
        return found


def native_architectures(cuobjdump: str, library: Path) -> list[str]:
    """The sm_XY of every cubin in the library (PTX is not native code), oldest first."""
    listed = subprocess.run([cuobjdump, "-lelf", str(library)], capture_output=True, text=True, check=True).stdout
    return sorted(set(re.findall(r"\.(sm_\d+)\.cubin", listed)), key=lambda a: int(a.removeprefix("sm_")))


def architecture_rows(cuobjdump: str, library: Path, classify, usage_of, demangle) -> list[ArchitectureRow]:
    """One row per architecture and march kernel. `classify(readable name)` gives a kernel's (report
    name, loads, dynamic shared bytes at the report's shape), None for a kernel that is no march;
    `usage_of(arch)` the resource usage by mangled name."""
    rows = []
    for arch in native_architectures(cuobjdump, library):
        usage = usage_of(arch)
        dump = subprocess.run([cuobjdump, "-sass", "-arch", arch, str(library)], capture_output=True, text=True,
                              check=True).stdout
        functions = sass.functions(dump, "Function")
        for mangled, readable in zip(functions, demangle(list(functions)), strict=True):
            kernel = classify(readable)
            if kernel is None:
                continue
            name, loads, dynamic_shared = kernel
            res = usage[mangled]
            copies = sum(1 for _, op in sass.INSTRUCTION.findall(functions[mangled])
                         if "LDGSTS" in op and (executed := sass.parse(op)) is not None and executed.name == "LDGSTS")
            rows.append(ArchitectureRow(
                arch=arch, kernel=name, loads=loads, registers=res["REG"], stack=res["STACK"], spills=res["LOCAL"],
                shared=res["SHARED"] + dynamic_shared, shared_limit=SHARED_OPT_IN.get(arch, 48 * KB),
                async_copies=copies))
    return rows


def table(rows: list[ArchitectureRow]) -> str:
    lines = ["| architecture | kernels | registers (most) | spills + stack (B) | shared per launched block (most, B) "
             "| opt-in limit (B) | whole-vector kernels with cp.async | whole-vector kernels over the limit (the "
             "general form runs) |", "|---|---|---|---|---|---|---|---|"]
    for arch in dict.fromkeys(r.arch for r in rows):
        of = [r for r in rows if r.arch == arch]
        vector = [r for r in of if r.loads == "vector"]
        over = [r.kernel for r in vector if not r.launched]
        lines.append(f"| {arch} | {len(of)} | {max(r.registers for r in of)} | "
                     f"{sum(r.spills + r.stack for r in of)} | {max(r.shared for r in of if r.launched)} | "
                     f"{of[0].shared_limit} | {sum(1 for r in vector if r.async_copies)} of {len(vector)} | "
                     f"{', '.join(over) or 'none'} |")
    return "\n".join(lines)
