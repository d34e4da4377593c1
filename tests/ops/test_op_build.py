"""Building and loading the compiled op: what a user sees when it cannot be built."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import ROOT


def run_python(code: str, tmp_path, **env) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "SEGNET_OPS_CACHE": str(tmp_path / "cache"), **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=environment)


def test_missing_compiler_is_named_with_what_to_do(tmp_path):
    result = run_python("import sys, ops.build; sys.exit(ops.build.main([]))", tmp_path, CXX="no-such-compiler")
    assert result.returncode == 1
    assert "No C++ compiler found (looked for 'no-such-compiler')" in result.stderr
    assert "op.backend=python" in result.stderr


def test_auto_falls_back_to_python_with_one_warning(tmp_path):
    code = (
        "import warnings, torch, ops\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    layer = ops.EdgeEnhance(2)\n"
        "    y = layer(torch.randn(1, 2, 5, 5))\n"
        "    ops.edge_enhance(torch.randn(1, 2, 5, 5), torch.ones(2))\n"
        "print(ops.resolve_backend('auto', torch.device('cpu')))\n"
        "print(len(caught), caught[0].message)\n"
    )
    result = run_python(code, tmp_path, CXX="no-such-compiler")
    assert result.returncode == 0, result.stderr
    resolved, warning = result.stdout.strip().splitlines()
    assert resolved == "python"
    assert warning.startswith("1 edge_enhance: backend='auto' falls back to python on cpu: No C++ compiler found")


def test_explicit_cpp_backend_without_compiler_raises(tmp_path):
    result = run_python("import ops; ops.EdgeEnhance(2, backend='cpp')", tmp_path, CXX="no-such-compiler")
    assert result.returncode != 0
    assert "OpsBuildError: No C++ compiler found" in result.stderr


BUILD = "import sys, ops.build; sys.exit(ops.build.main([]))"
CHECK = (
    "import torch, ops\n"
    "x, a = torch.randn(2, 3, 9, 11, dtype=torch.float64), torch.randn(3, dtype=torch.float64)\n"
    "assert torch.allclose(ops.edge_enhance(x, a, backend='cpp'), ops.edge_enhance_reference(x, a))\n"
    "print('op works')\n"
)


def environment(tmp_path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "SEGNET_OPS_CACHE": str(tmp_path / "cache")}


@pytest.mark.slow
def test_a_build_killed_mid_compile_does_not_block_the_next_one(tmp_path):
    builder = subprocess.Popen([sys.executable, "-c", BUILD], env=environment(tmp_path), start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list((tmp_path / "cache").glob("*/build.ninja")) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # the compiler is running now
    assert builder.poll() is None, "the build ended before it could be killed"
    os.killpg(builder.pid, signal.SIGKILL)  # the builder, ninja and the compilers
    builder.wait()
    assert not list((tmp_path / "cache").glob("*/*.so"))
    result = run_python(CHECK, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "op works"


@pytest.mark.slow
def test_two_processes_building_into_an_empty_cache_both_get_a_working_op(tmp_path):
    both = [subprocess.Popen([sys.executable, "-c", CHECK], env=environment(tmp_path), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for process in both:
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, err[-3000:]
        assert out.strip() == "op works"


def test_a_lock_file_left_by_an_older_torch_is_removed_with_a_warning(tmp_path, monkeypatch, caplog):
    import ops.library as library

    monkeypatch.setattr(library, "_torch_lock_is_os_level", lambda: False)  # torch with FileBaton
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "lock").touch()  # what a killed FileBaton build leaves
    with caplog.at_level("WARNING", logger="ops.library"), library.build_lock(tmp_path / "build"):
        assert not (tmp_path / "build" / "lock").exists()
    assert "left by a build that was killed" in caplog.text


def test_the_lock_file_of_an_os_level_torch_lock_is_left_alone(tmp_path, monkeypatch):
    import ops.library as library

    monkeypatch.setattr(library, "_torch_lock_is_os_level", lambda: True)
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "lock").touch()  # filelock's file, held or not, means nothing by itself
    with library.build_lock(tmp_path / "build"):
        assert (tmp_path / "build" / "lock").exists()
