"""scripts/ablation_report.py on a placement sweep: a variant with a planted per-case improvement
is called better, a copy of the baseline is called not different, and the table carries each
variant's cost. The sweep folder is written as Hydra and training write one."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import numpy as np
import pytest
import yaml

from helpers import ROOT

CLASSES = ("core", "shell")


def write_hydra(folder, variant: str, seed: int, fold: int) -> None:
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"seed": seed, "data": {"fold": fold}}))
    choices = {"hydra": {"runtime": {"choices": {"variant": variant}}}}
    (folder / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump(choices))


def write_run(folder, variant: str, seed: int, fold: int, dice: dict[str, float]) -> None:
    write_hydra(folder, variant, seed, fold)
    metrics = {"val_dice_per_case": {case: {c: value for c in CLASSES} for case, value in dice.items()},
               "parameters": 1000 + (variant != "none"), "step_time_ms_median": 10.0, "peak_memory_mb": 100.0}
    (folder / "metrics.json").write_text(json.dumps(metrics))


def test_a_planted_improvement_is_better_and_a_copy_is_not_different(tmp_path):
    rng = np.random.default_rng(0)
    index = 0
    for fold in range(2):
        cases = [f"case_{fold}_{i}" for i in range(10)]
        for seed in range(3):
            base = {case: float(rng.uniform(0.6, 0.9)) for case in cases}
            variants = {"none": base, "copy": dict(base),
                        "edge": {case: value + 0.03 + float(rng.normal(0, 0.005)) for case, value in base.items()}}
            for variant, dice in variants.items():
                write_run(tmp_path / str(index), variant, seed, fold, dice)
                index += 1
    ran = subprocess.run([sys.executable, str(ROOT / "scripts" / "ablation_report.py"), str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    with open(tmp_path / "ablation.csv", newline="") as f:
        rows = {row["variant"]: row for row in csv.DictReader(f)}
    assert set(rows) == {"copy", "edge"} and rows["edge"]["n_cases"] == "20"
    assert rows["edge"]["verdict"] == "better" and float(rows["edge"]["ci_low"]) > 0
    assert float(rows["edge"]["mean_difference"]) == pytest.approx(0.03, abs=0.005)
    assert rows["copy"]["verdict"].startswith("no difference found")
    assert float(rows["edge"]["parameters"]) == 1001.0
    assert "| edge | 20 | 1001 |" in ran.stdout and (tmp_path / "ablation.png").is_file()


def test_a_failed_run_is_named_and_fails_the_report(tmp_path):
    for index, variant in enumerate(["none", "edge"]):
        write_run(tmp_path / str(index), variant, 0, 0, {"a": 0.5, "b": 0.6, "c": 0.7})
    write_hydra(tmp_path / "2", "edge", 1, 0)  # a run that died before its metrics.json
    ran = subprocess.run([sys.executable, str(ROOT / "scripts" / "ablation_report.py"), str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 1
    assert "- FLAG: run 2 (edge): no metrics.json" in ran.stdout
