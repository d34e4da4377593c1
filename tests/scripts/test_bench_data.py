"""scripts/bench_data.py at its smoke size: it runs, and its table has every measurement, finite."""

from __future__ import annotations

import csv
import math
import subprocess
import sys

import pytest

from helpers import ROOT

COLUMNS = ["measurement", "path", "setting", "cases", "value", "unit"]
MEASUREMENTS = {
    "batch augmentation CPU", "batch augmentation time", "cache on disk per case", "crop CPU per sample", "crop rate",
    "fingerprint time", "fingerprint time per added case", "setup RSS added", "setup RSS added per added case",
    "setup time", "setup time per added case", "worker RSS", "worker RSS per added case", "worker private memory",
    "worker private memory per added case",
}


@pytest.mark.slow
def test_the_quick_benchmark_writes_its_table(tmp_path):
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_data.py"), "--quick", "--work", str(tmp_path / "work"),
         "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "| " + " | ".join(COLUMNS) + " |" in run.stdout
    with open(out / "bench_data.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == COLUMNS
    assert {row["measurement"] for row in rows} == MEASUREMENTS
    assert all(math.isfinite(float(row["value"])) and row["unit"] for row in rows)
    paths = {row["path"] for row in rows if row["measurement"] == "setup time"}
    assert paths == {"CacheDataset", "preprocessed cache: cold", "preprocessed cache: warm"}
    assert {row["cases"] for row in rows if row["measurement"] == "setup time"} == {"2", "4"}
    paths = {row["path"] for row in rows if row["measurement"] == "fingerprint time"}
    assert paths == {"cold record", "warm record"}
