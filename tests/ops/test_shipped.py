"""The op libraries a wheel ships (ops/shipped.py): loaded only when built for this torch, and
otherwise refused in one line for the JIT build; `python -m ops.build --info` says which loads."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import ROOT
from ops import library, shipped


def fake_wheel_lib(folder: Path, torch_version: str) -> Path:
    """A shipped-library folder holding the JIT-built CPU library, recorded as built for torch_version."""
    built = library.load("cpu")
    folder.mkdir()
    shutil.copy(built.path, folder / "segnet_ops_cpu.so")
    record = shipped.build_record({"cpu": "segnet_ops_cpu.so"}, list(library.cpu_flags()), None)
    (folder / shipped.BUILD_INFO).write_text(json.dumps({**record, "torch": torch_version}))
    return folder


def test_a_library_built_for_another_torch_is_refused_and_the_jit_build_loads(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(shipped, "LIB_DIR", fake_wheel_lib(tmp_path / "_lib", "2.0.0"))
    choice = shipped.shipped_library("cpu")
    assert choice.path is None and choice.refused
    assert choice.reason == (
        f"segnet_ops_cpu.so was built for torch 2.0.0 but torch {torch.__version__} is running: reinstall the segnet "
        f"wheel built for torch {torch.__version__}, or let segnet build the op just in time (it does now)")
    with caplog.at_level(logging.WARNING, logger="ops.library"):
        loaded = library.load.__wrapped__("cpu")
    assert loaded.path.is_relative_to(library.cache_root())  # the JIT cache's, not the shipped one
    assert [r.getMessage() for r in caplog.records] == [f"segnet: not loading the shipped op library: {choice.reason}"]


def shipped_record(folder: Path, kind: str, **changed) -> Path:
    """A shipped-library folder whose build record says `changed` about a (placeholder) library."""
    folder.mkdir()
    (folder / f"segnet_ops_{kind}.so").write_bytes(b"")
    record = shipped.build_record({kind: f"segnet_ops_{kind}.so"}, list(library.cpu_flags()), "9.0")
    (folder / shipped.BUILD_INFO).write_text(json.dumps({**record, "cuda": torch.version.cuda, **changed}))
    return folder


@pytest.mark.parametrize("kind, changed, reason", [
    ("cpu", {"cxx11_abi": not torch._C._GLIBCXX_USE_CXX11_ABI}, "was built for torch"),
    ("cuda", {"cuda": "9.9"}, "was built for CUDA 9.9 but torch runs CUDA"),
    ("cpu", {"cpu_flags": ["-O3", "-mavx2", "-mfma"]}, "was built with AVX2 instructions, which this CPU lacks"),
])
def test_a_library_built_for_another_build_is_refused_with_the_reason(tmp_path, monkeypatch, kind, changed, reason):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")  # a CPU without AVX2
    choice = shipped.shipped_library(kind, shipped_record(tmp_path / "_lib", kind, **changed))
    assert choice.path is None and choice.refused and reason in choice.reason


def test_a_listed_library_that_is_missing_is_refused(tmp_path):
    folder = shipped_record(tmp_path / "_lib", "cpu")
    (folder / "segnet_ops_cpu.so").unlink()
    choice = shipped.shipped_library("cpu", folder)
    assert choice.path is None and choice.refused and "is listed in" in choice.reason and "but missing" in choice.reason


def test_a_record_for_this_build_is_taken(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    folder = shipped_record(tmp_path / "_lib", "cpu")
    assert shipped.shipped_library("cpu", folder).path == folder / "segnet_ops_cpu.so"


def test_a_library_built_for_this_torch_is_loaded_from_the_package(tmp_path):
    # In a fresh process: a second copy of the library in this one would register its schemas twice.
    lib_dir = fake_wheel_lib(tmp_path / "_lib", torch.__version__)
    check = (
        "import sys; from pathlib import Path; from ops import library, shipped; "
        "shipped.LIB_DIR = Path(sys.argv[1]); "
        "assert library.where_from('cpu')[0] == 'shipped'; "
        "assert library.load('cpu').path == shipped.LIB_DIR / 'segnet_ops_cpu.so'; "
        "assert shipped.shipped_library('cuda').reason == 'the installed wheel was built without the cuda library'"
    )
    ran = subprocess.run([sys.executable, "-c", check, str(lib_dir)], capture_output=True, text=True, timeout=300,
                         cwd=ROOT)
    assert ran.returncode == 0, ran.stderr[-2000:]


def test_info_says_what_would_load_and_why():
    result = subprocess.run([sys.executable, "-m", "ops.build", "--info"], capture_output=True, text=True, cwd=ROOT,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"torch {torch.__version__}")
    cpu = next(i for i, line in enumerate(lines) if line.startswith("cpu: "))
    assert lines[cpu].startswith(("cpu: JIT cache: ", "cpu: JIT build: ")) and "segnet_ops_cpu" in lines[cpu]
    assert lines[cpu + 1] == "  why: no compiled library ships with this install (a checkout, or a wheel built " \
                             "without the op)"


@pytest.mark.parametrize("archs, capability, runs", [
    ("8.0", (8, 6), True),  # sm_80 code on an RTX 3090, A10, A40
    ("8.0", (8, 9), True),  # and on an RTX 4090, L4, L40
    ("8.6", (8, 0), False),  # never on an older minor
    ("8.0", (9, 0), False),  # nor on another major
    ("8.0+PTX", (9, 0), True),  # whose driver compiles the PTX
    ("9.0a", (9, 0), True),
    ("8.0;9.0a", (9, 1), False),  # arch-specific code runs on its own GPU only
    ("10.0f", (10, 3), True),  # a family build on its later members
    ("7.5 8.0", (8, 7), True),
])
def test_cuda_code_runs_on_the_gpus_its_architecture_covers(archs, capability, runs):
    assert shipped.gpu_covered(archs, capability) is runs


def test_a_cuda_library_for_an_older_minor_of_this_gpu_is_taken(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 6))
    folder = shipped_record(tmp_path / "_lib", "cuda", cuda_archs="8.0")
    assert shipped.shipped_library("cuda", folder).path == folder / "segnet_ops_cuda.so"
    refused = shipped.shipped_library("cuda", shipped_record(tmp_path / "_lib7", "cuda", cuda_archs="7.0"))
    assert refused.refused and "none of which runs on this GPU (8.6)" in refused.reason
