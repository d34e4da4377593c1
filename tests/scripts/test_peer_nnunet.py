"""scripts/peer_nnunet.py end to end at a tiny budget: nnU-Net's converter, planner, trainer and
predictor beside segnet's training and evaluation, on the same fold, scored by one evaluator."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from helpers import ROOT
from segnet.data.dataset_json import describe_dataset
from segnet.data.phantom import write_phantom_dataset
from segnet.data.splits import choose_split


@pytest.mark.slow
def test_both_tools_train_for_the_budget_and_are_compared_on_the_same_cases(tmp_path):
    dataset = write_phantom_dataset(tmp_path / "Task01_Phantom", [((1.5, 1.5, 1.5), "RAS")] * 5)
    output = tmp_path / "peer"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "peer_nnunet.py"), str(dataset), "--budget-seconds", "4",
         "--calibration-steps", "2", "--fold", "1", "--output", str(output)],
        cwd=tmp_path, capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHONPATH": str(ROOT), "SEGNET_PREPROCESSED": str(tmp_path / "cache")},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads((output / "peer.json").read_text())
    fold = choose_split(describe_dataset(str(dataset)), 1, 5, 12345)
    assert result["cases"] == [case.name for case in fold.val]
    # nnU-Net trained and validated segnet's fold: its splits file is segnet's split
    splits = json.loads((output / "nnUNet_preprocessed" / "Dataset900_Phantom" / "splits_final.json").read_text())
    assert splits[1] == {"train": [c.name for c in fold.train], "val": [c.name for c in fold.val]}
    # each tool's steps sized to the budget by its own measured step time
    nnunet, segnet = result["nnunet"], result["segnet"]
    assert nnunet["epochs"] * nnunet["iterations_per_epoch"] == max(1, math.floor(4 / nnunet["step_seconds"]))
    assert segnet["max_steps"] == max(1, math.floor(4 / segnet["step_seconds"]))
    # one evaluator's scores for both, on every validation case and class
    scored = {(row["variant"], row["case"], row["class"], row["metric"]) for row in result["scores"]}
    assert scored == {(tool, case, c, metric) for tool in ("nnunet", "segnet") for case in result["cases"]
                      for c in ("1", "2") for metric in ("Dice", "HD95", "NSD")}
    assert all(0 <= row["value"] <= 1 for row in result["scores"] if row["metric"] == "Dice")
    table = (output / "peer.md").read_text()
    assert table in done.stdout  # printed as written
    assert all(f"| {metric} |" in table for metric in ("Dice", "HD95", "NSD"))
    dice = result["comparison"]["Dice"]
    by_tool = {tool: [r["value"] for r in result["scores"] if r["variant"] == tool and r["metric"] == "Dice"]
               for tool in ("nnunet", "segnet")}
    assert dice["mean_difference"] == pytest.approx(
        sum(by_tool["segnet"]) / len(by_tool["segnet"]) - sum(by_tool["nnunet"]) / len(by_tool["nnunet"]), abs=1e-9)
    assert (output / "peer.png").stat().st_size > 0
