"""Building and loading the compiled op: what a user sees when it cannot be built."""

from __future__ import annotations

import os
import subprocess
import sys

from train_helpers import ROOT


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
