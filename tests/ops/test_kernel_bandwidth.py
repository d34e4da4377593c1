"""scripts/kernel_bandwidth.py, which gpu_check.sh runs on a GPU, measured here on the cpp kernels so
that it keeps working on machines without one; and which of the report's modeled fractions
(scripts/kernel_model/report.py) stands beside a measurement."""

from __future__ import annotations

import csv
import math
import subprocess
import sys

import pytest

from helpers import ROOT
from scripts.kernel_model.report import modeled


@pytest.mark.slow
def test_measures_every_kernel_and_dtype_on_the_cpu(tmp_path):
    result = subprocess.run(
        [sys.executable, "scripts/kernel_bandwidth.py", "--device", "cpu", "--quick", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = list(csv.DictReader(open(tmp_path / "kernel_bandwidth.csv")))
    assert {(r["shape"], r["kernel"], r["dtype"]) for r in rows} == {
        (shape, f"{nd}D {direction}", dtype)
        for shape, nd in (("2x4x64x128", 2), ("1x2x16x32x64", 3))
        for direction in ("forward", "backward")
        for dtype in ("float32", "float16", "bfloat16", "float64")
    }
    for r in rows:
        assert 0 < float(r["measured_fraction"]) < math.inf and float(r["ms"]) > 0
        assert math.isnan(float(r["modeled_fraction"]))  # no model for the CPU kernels
    assert "| 2x4x64x128 | 2D forward | float32 |" in result.stdout


def test_a_measurement_stands_beside_the_model_at_its_own_shape():
    model = {("(2, 16, 64, 96, 96)", 3, "forward", "float16"): 0.69, ("best", 3, "forward", "float16"): 0.97}
    assert modeled(model, (2, 16, 64, 96, 96), "forward", "float16") == 0.69
    assert modeled(model, (1, 2, 16, 32, 64), "forward", "float16") == 0.97  # not in the report
    assert math.isnan(modeled(model, (8, 32, 256, 256), "forward", "float16"))
