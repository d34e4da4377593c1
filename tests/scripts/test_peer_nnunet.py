"""scripts/peer_nnunet.py end to end at a tiny budget: nnU-Net's converter, planner, trainer and
predictor beside segnet's training and evaluation, on the same fold, scored by one evaluator,
both sides alike: the same cases, the same measured seconds, final weights, mirrored; and nnU-Net
once more with segnet's patch and batch."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from helpers import ROOT
from helpers.data import write_decathlon
from scripts import peer_nnunet
from segnet.data.dataset_json import describe_dataset
from segnet.data.splits import choose_split
from segnet.generated.phantom import write_phantom_dataset

BUDGET = 4


@pytest.mark.slow
def test_both_tools_train_for_the_budget_and_are_compared_on_the_same_cases(tmp_path):
    dataset = write_phantom_dataset(tmp_path / "Task01_Phantom", [((1.5, 1.5, 1.5), "RAS")] * 5)
    output = tmp_path / "peer"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "peer_nnunet.py"), str(dataset), "--budget-seconds", str(BUDGET),
         "--calibration-steps", "2", "--fold", "1", "--output", str(output)],
        cwd=tmp_path, capture_output=True, text=True, timeout=900,
        # one spawned export process per nnU-Net validation, not one per core: each imports torch anew
        env={**os.environ, "SEGNET_PREPROCESSED": str(tmp_path / "cache"), "nnUNet_def_n_proc": "1"},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads((output / "peer.json").read_text())
    fold = choose_split(describe_dataset(str(dataset)), 1, 5, 12345)
    assert result["cases"] == [case.name for case in fold.val]
    # nnU-Net trained and validated segnet's fold: its splits file is segnet's split
    preprocessed = output / "nnUNet_preprocessed" / "Dataset900_Phantom"
    splits = json.loads((preprocessed / "splits_final.json").read_text())
    assert splits[1] == {"train": [c.name for c in fold.train], "val": [c.name for c in fold.val]}
    # each run's steps sized to the budget by its own step time, measured end to end
    tools = ("nnunet", peer_nnunet.PLAN_MATCHED, "segnet")
    for tool in tools:
        assert result[tool]["steps"] == max(1, math.floor(BUDGET / result[tool]["step_seconds"])), tool
    # the plan-matched nnU-Net trained segnet's crops: its batch, and its patch in nnU-Net's axes
    matched = json.loads((preprocessed / f"{peer_nnunet.PLAN_MATCHED}.json").read_text())["configurations"]["2d"]
    assert result[peer_nnunet.PLAN_MATCHED]["batch_size"] == matched["batch_size"] == result["segnet"]["batch_size"]
    assert result[peer_nnunet.PLAN_MATCHED]["patch_size"] == matched["patch_size"]
    assert sorted(matched["patch_size"]) == sorted(result["segnet"]["patch_size"])
    # segnet scored with its final weights, mirrored, as nnU-Net validates
    evaluated = json.loads((output / "segnet_evaluation" / "summary.json").read_text())["evaluated"]
    assert evaluated["checkpoint"].endswith("segnet_run/checkpoints/final.ckpt") and evaluated["tta"] is True
    assert evaluated["step"] == result["segnet"]["steps"]
    assert evaluated["postprocessing"]["rules"] == {"foreground_largest_component": False,
                                                    "classes_largest_component": [], "regions_largest_component": []}
    # one evaluator's scores for every run, on every validation case and class
    scored = {(row["variant"], row["case"], row["class"], row["metric"]) for row in result["scores"]}
    assert scored == {(tool, case, c, metric) for tool in tools for case in result["cases"]
                      for c in ("1", "2") for metric in ("Dice", "HD95", "NSD")}
    assert all(0 <= row["value"] <= 1 for row in result["scores"] if row["metric"] == "Dice")
    table = (output / "peer.md").read_text()
    assert table in done.stdout  # printed as written
    assert f"Compared: {peer_nnunet.COMPARED}." in table and result["compared"] == peer_nnunet.COMPARED
    for baseline in ("nnunet", peer_nnunet.PLAN_MATCHED):
        dice = result["comparison"][baseline]["Dice"]
        assert dice["mean_difference"] == pytest.approx(dice["variant_mean"] - dice["baseline_mean"], abs=1e-9)
        assert f"| Dice | {peer_nnunet.TOOLS[baseline]} | {dice['baseline_mean']:.4f} |" in table
    assert (output / "peer.png").stat().st_size > 0


def test_a_dataset_that_states_its_split_is_compared_on_it(tmp_path):
    dataset = write_decathlon(tmp_path / "Task02_Stated", cases=4, validation=True)  # case_000 validates
    assert peer_nnunet.segnet_split(dataset) == [{"train": ["case_001", "case_002", "case_003"], "val": ["case_000"]}]


def test_nnunet_checks_and_trains_the_split_a_dataset_states(tmp_path, monkeypatch):
    dataset = write_decathlon(tmp_path / "Task03_Stated", cases=4, validation=True)  # case_000 validates
    spec = json.loads((dataset / "dataset.json").read_text())
    (dataset / "dataset.json").write_text(json.dumps({**spec, "numTraining": len(spec["training"])}))  # as MSD counts
    for variable in ("nnUNet_raw", "nnUNet_preprocessed", "nnUNet_results"):
        monkeypatch.setenv(variable, str(tmp_path / variable))  # restored after the test, as the next two
    monkeypatch.setenv("nnUNet_n_proc_DA", "1")
    monkeypatch.setenv("nnUNet_def_n_proc", "1")
    peer_nnunet.point_nnunet_at(tmp_path)
    splits = peer_nnunet.segnet_split(dataset)
    name = peer_nnunet.nnunet_raw(dataset, tmp_path)
    peer_nnunet.nnunet_prepare(name, "2d", splits)  # nnU-Net's fingerprint and integrity check, its preprocessing
    written = json.loads((tmp_path / "nnUNet_preprocessed" / name / "splits_final.json").read_text())
    assert written == [{"train": ["case_001", "case_002", "case_003"], "val": ["case_000"]}]
    raw = json.loads((tmp_path / "nnUNet_raw" / name / "dataset.json").read_text())
    assert raw["numTraining"] == 4 and "validation" not in raw
