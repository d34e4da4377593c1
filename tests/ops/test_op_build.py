"""Building and loading the compiled op: what a user sees when it cannot be built."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

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


# The lock safety of concurrent and killed builds, shown on the smallest library built by the op's
# loader (ops.library.build: the same lock, stamp and cache as the op's libraries), which compiles
# in seconds instead of the op's minutes: one op through torch's headers.
TINY_SOURCE = """
#include <ATen/ATen.h>
#include <torch/library.h>

namespace {
at::Tensor twice(const at::Tensor& x) { return x * 2; }
}  // namespace

TORCH_LIBRARY(segnet_tiny, m) { m.def("twice(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(segnet_tiny, CPU, m) { m.impl("twice", &twice); }
"""
TINY_BUILD = (
    "import sys, torch\n"
    "from pathlib import Path\n"
    "from ops import library\n"
    "library.build('segnet_tiny', Path(sys.argv[1]), ('tiny.cpp',), ('-O0',), extra_cflags=['-O0'])\n"
    "x = torch.arange(4.0)\n"
    "assert torch.equal(torch.ops.segnet_tiny.twice(x), 2 * x)\n"
    "print('op works')\n"
)


def tiny_build(source: Path, cache: Path, quiet: bool = False, text: str = TINY_SOURCE, **env: str) -> subprocess.Popen:
    """A process building the tiny library (its source `text`) from the folder `source` into `cache`."""
    source.mkdir(parents=True, exist_ok=True)
    (source / "tiny.cpp").write_text(text)
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "SEGNET_OPS_CACHE": str(cache), **env}
    output = subprocess.DEVNULL if quiet else subprocess.PIPE
    return subprocess.Popen([sys.executable, "-c", TINY_BUILD, str(source)], env=environment, text=True,
                            stdout=output, stderr=output, start_new_session=True)


def assert_builds_and_works(process: subprocess.Popen) -> None:
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err[-3000:]
    assert out.strip() == "op works"


@pytest.mark.slow
def test_a_build_killed_mid_compile_does_not_block_the_next_one(tmp_path):
    cache = tmp_path / "cache"
    builder = tiny_build(tmp_path / "src", cache, quiet=True)
    deadline = time.monotonic() + 120
    while not list(cache.glob("*/build.ninja")) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # the compiler is running now
    assert builder.poll() is None, "the build ended before it could be killed"
    os.killpg(builder.pid, signal.SIGKILL)  # the builder, ninja and the compiler
    builder.wait()
    assert not list(cache.glob("*/*.so")) and not list(cache.glob("*/built"))
    assert_builds_and_works(tiny_build(tmp_path / "src", cache))


@pytest.mark.slow
def test_two_processes_building_into_an_empty_cache_both_get_a_working_op(tmp_path):
    both = [tiny_build(tmp_path / "src", tmp_path / "cache") for _ in range(2)]
    for process in both:
        assert_builds_and_works(process)
    assert len(list((tmp_path / "cache").glob("*/built"))) == 1  # one build, found finished by the other


@pytest.mark.slow
def test_a_finished_build_is_found_by_content_from_another_folder(tmp_path):
    cache = tmp_path / "cache"
    assert_builds_and_works(tiny_build(tmp_path / "checkout", cache))
    # Another checkout of the same sources loads that build: with no compiler there is no other way.
    assert_builds_and_works(tiny_build(tmp_path / "clone", cache, CXX="no-such-compiler"))
    # A finished build whose library was deleted is built again, which needs the compiler.
    for library in cache.glob("*/segnet_tiny.so"):
        library.unlink()
    gone = tiny_build(tmp_path / "clone", cache, CXX="no-such-compiler")
    out, err = gone.communicate(timeout=600)
    assert gone.returncode != 0 and "No C++ compiler found" in err
    # A changed source is another build, which needs the compiler.
    changed = tiny_build(tmp_path / "changed", cache, text=TINY_SOURCE + "// changed\n", CXX="no-such-compiler")
    out, err = changed.communicate(timeout=600)
    assert changed.returncode != 0 and "No C++ compiler found" in err


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
