"""Constructed sweep folders, written as Hydra and training write them (.hydra/config.yaml,
.hydra/hydra.yaml's chosen options, config.yaml, metrics.json), with scores whose answer is known, and the
report script run on them."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import yaml

from helpers import ROOT

CLASSES = ("core", "shell")
METRIC_KEYS = {"Dice": "val_dice_per_case", "HD95": "val_hd95_per_case", "NSD": "val_nsd_per_case",
               "clDice": "val_cldice_per_case", "Betti0 error": "val_betti0_error_per_case"}


def write_hydra(folder: Path, choices: dict, config: dict) -> None:
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"runtime": {"choices": choices}}}))


def write_run(folder: Path, choices: dict, config: dict, scores: dict[str, dict[str, float]], **metrics) -> None:
    """A finished run whose every class of a case scores scores[metric][case]."""
    write_hydra(folder, choices, config)
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    per_case = {key: {case: {c: value for c in CLASSES} for case, value in scores[metric].items()}
                for metric, key in METRIC_KEYS.items() if metric in scores}
    metrics = {"parameters": 1000, "step_time_ms_median": 10.0, "samples_per_s": 100.0, "peak_memory_mb": 100.0,
               **per_case, **metrics}
    (folder / "metrics.json").write_text(json.dumps(metrics))


def run_report(sweep: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "ablation_report.py"), str(sweep), *args],
                          capture_output=True, text=True, timeout=300)


def csv_rows(sweep: Path, name: str = "ablation.csv") -> dict[tuple[str, str, str], dict[str, str]]:
    """The report's CSV (ablation.csv, or a view's) keyed by (group, metric, variant)."""
    with open(sweep / name, newline="") as f:
        return {(row["group"], row["metric"], row["variant"]): row for row in csv.DictReader(f)}
