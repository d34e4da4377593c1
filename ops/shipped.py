"""Op libraries built into a wheel, and whether this process may load them.

A wheel built with the op (setup.py) carries ops/_lib/: the libraries and
build_info.json, what they were built against. C++ libraries against torch's C++ API have no
stable ABI: a library built for another torch (or CUDA) version may load and then crash, so it
is never loaded; the reason is one line, and the caller falls back to the JIT cache or a JIT
build. Neither are CPU instructions this machine lacks, nor CUDA code for none of its GPU's
architectures.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

LIB_DIR = Path(__file__).resolve().parent / "_lib"
BUILD_INFO = "build_info.json"
VECTOR_FLAGS = ("-mavx2", "-mfma")  # what cpu_flags() adds where the build machine has AVX2


@dataclass(frozen=True)
class ShippedChoice:
    path: Path | None  # the library to load, or None
    reason: str  # why it is loaded or not
    refused: bool = False  # a library is shipped but unusable here (the user should hear why)


def build_record(libraries: dict[str, str], cpu_flags: list[str], cuda_archs: str | None) -> dict[str, Any]:
    """What build_info.json records at build time."""
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda if "cuda" in libraries else None,
        "cuda_archs": cuda_archs,
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        "cpu_flags": cpu_flags,
        "libraries": libraries,
    }


def gpu_covered(archs: str, capability: tuple[int, int]) -> bool:
    """Whether code built for one of `archs` ("8.0;8.6;9.0a;9.0+PTX", TORCH_CUDA_ARCH_LIST's
    spelling) runs on a GPU of `capability`. Native code for X.Y runs on every X.Z with Z >= Y (sm_80
    code on an RTX 3090's 8.6); an arch-specific build ("9.0a") only on X.Y itself; a family build
    ("10.0f") on its major's later minors; PTX on every later GPU, whose driver compiles it."""
    for entry in archs.replace(" ", ";").split(";"):
        version, ptx = entry.removesuffix("+PTX"), entry.endswith("+PTX")
        if not version:
            continue
        suffix = version[-1] if version[-1] in "af" else ""
        built = tuple(int(v) for v in version.removesuffix(suffix).split(".")[:2])
        if suffix == "a":
            runs = built == capability
        else:
            runs = built <= capability if ptx else (built[0] == capability[0] and built[1] <= capability[1])
        if runs:
            return True
    return False


def shipped_library(kind: str, lib_dir: Path | None = None) -> ShippedChoice:
    """The shipped "cpu" or "cuda" library (in LIB_DIR unless told) if this process may load it."""
    lib_dir = lib_dir or LIB_DIR
    info_path = lib_dir / BUILD_INFO
    if not info_path.is_file():
        return ShippedChoice(None, "no compiled library ships with this install (a checkout, or a wheel built "
                                   "without the op)")
    record = json.loads(info_path.read_text())
    name = record["libraries"].get(kind)
    if name is None:
        return ShippedChoice(None, f"the installed wheel was built without the {kind} library")
    path = lib_dir / name
    if not path.is_file():
        return ShippedChoice(None, f"{path} is listed in {info_path} but missing", refused=True)
    running_cuda = torch.version.cuda
    if record["torch"] != torch.__version__ or record["cxx11_abi"] != bool(torch._C._GLIBCXX_USE_CXX11_ABI):
        return ShippedChoice(None, (
            f"{path.name} was built for torch {record['torch']} but torch {torch.__version__} is running: "
            f"reinstall the segnet wheel built for torch {torch.__version__}, or let segnet build the op just in "
            "time (it does now)"), refused=True)
    if kind == "cuda" and record["cuda"] != running_cuda:
        return ShippedChoice(None, (
            f"{path.name} was built for CUDA {record['cuda']} but torch runs CUDA {running_cuda}: reinstall the "
            "wheel built for it, or let segnet build the op just in time (it does now)"), refused=True)
    gpu = torch.cuda.get_device_capability() if kind == "cuda" and torch.cuda.is_available() else None
    if gpu and not gpu_covered(record["cuda_archs"] or "", gpu):
        return ShippedChoice(None, (
            f"{path.name} holds code for {record['cuda_archs']}, none of which runs on this GPU ({gpu[0]}.{gpu[1]}): "
            f"build a wheel with TORCH_CUDA_ARCH_LIST including {gpu[0]}.{gpu[1]}, or let segnet build the op just in "
            "time (it does now)"), refused=True)
    if kind == "cpu" and set(VECTOR_FLAGS) & set(record["cpu_flags"]) and \
            torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        return ShippedChoice(None, (
            f"{path.name} was built with AVX2 instructions, which this CPU lacks: let segnet build the op just in "
            "time (it does now)"), refused=True)
    return ShippedChoice(path, f"shipped in the installed package, built for torch {record['torch']}")
