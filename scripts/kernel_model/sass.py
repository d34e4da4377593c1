"""SASS as `cuobjdump -sass` prints it: a library's functions, their loops, and each instruction's
name, modifiers, operands and the registers it reads and writes.

An instruction predicated on `@!PT` is never executed and is no instruction here: PT is the
predicate that is always true (nvdisasm's SASS), so !PT is always false; ptxas emits such filler,
e.g. `@!PT LDS RZ, [RZ]` beside asynchronous copies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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

# Double-precision arithmetic: its operands are register pairs.
FP64 = {"DADD", "DMUL", "DFMA", "DSETP", "DMNMX", "DSET"}
# Loads whose destination takes the access width.
LOADS = {"LDG", "LDS", "LDC"}
# Instructions that write no register: every register they name is read.
NO_DESTINATION = {"STG", "STS", "LDGSTS", "RED", "BAR", "BRA", "BSSY", "BSYNC", "WARPSYNC", "DEPBAR", "LDGDEPBAR",
                  "EXIT", "NOP"}


@dataclass(frozen=True)
class Instruction:
    name: str
    modifiers: str
    operands: str
    reads: frozenset[str]
    writes: frozenset[str]


def functions(text: str, marker: str) -> dict[str, str]:
    """Split cuobjdump output into {mangled function name: its text}. The marker is matched at a
    line's start only: a pattern that may start at any space backtracks over megabytes of SASS."""
    parts = re.split(rf"\n[ \t]*{marker}[ \t]*:?[ \t]*(\S+?):?[ \t]*\n", text)
    return dict(zip(parts[1::2], parts[2::2], strict=True))  # [before, name, text, name, text, ...]


def loops(function: str) -> list[list[str]]:
    """The bodies of a function's loops, each from its latch's target to the latch, as the text of
    their instructions."""
    code = [(int(a, 16), op) for a, op in INSTRUCTION.findall(function)]
    bodies = []
    for address, op in code:
        latch = LATCH.search(op)
        if latch and int(latch.group(1), 16) <= address:
            bodies.append([o for a, o in code if int(latch.group(1), 16) <= a <= address])
    return bodies


def access_bytes(modifiers: str, default: int = 4) -> int:
    """Bytes per lane of a load or store from its modifiers (.64, .128, .U16, .U8, ...)."""
    for bits, size in ((".128", 16), (".64", 8), (".U16", 2), (".S16", 2), (".U8", 1), (".S8", 1)):
        if bits in modifiers + ".":
            return size
    return default


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
    wide = 8 if name in FP64 or ".F64" in modifiers else 4
    width = access_bytes(modifiers) if name in LOADS else 8 if ".WIDE" in modifiers else wide
    if PREDICATE.fullmatch(tokens[0]):
        written, rest = tokens[:2], tokens[2:]
    else:
        written, rest = tokens[:1], tokens[1:]
        while rest and PREDICATE.fullmatch(rest[0]):
            written.append(rest.pop(0))
    return registers(",".join(rest), wide), registers(written[0], width) | registers(",".join(written[1:]))


def parse(op: str) -> Instruction | None:
    """One SASS instruction, or None if it never executes (`@!PT`: see the docstring)."""
    guard = GUARD.match(op)
    if guard and guard.groups() == ("!", "PT"):
        return None
    text = op[guard.end():] if guard else op
    match = OPCODE.match(text)
    name, modifiers, operands = match.group(1), match.group(2), text[match.end():]
    reads, writes = reads_and_writes(name, modifiers, operands)
    if guard:
        reads |= registers(guard.group(2))
    return Instruction(name, modifiers, operands, frozenset(reads), frozenset(writes))


def stored_bytes(code: list[Instruction]) -> int:
    """Bytes per lane that `code` stores to global memory."""
    return sum(access_bytes(i.modifiers) for i in code if i.name == "STG")
