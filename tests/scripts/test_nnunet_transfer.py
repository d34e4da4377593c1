"""scripts/nnunet_transfer.py's parts: the target task (the source's anatomy at a third of its
contrast), its folds, the from-scratch start (nnU-Net's network freshly initialized, in a model
folder of its own) and the table's paired comparisons. End to end it trains for minutes: its
results are docs/results/nnunet-transfer.md."""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest
import torch

from helpers import script_module
from segnet.generated.blobs import write_blob_dataset


@pytest.fixture(scope="module")
def transfer():
    return script_module("nnunet_transfer")


def blob_contrast(root, case: str) -> tuple[float, float]:
    image = np.asarray(nib.load(root / "imagesTr" / f"{case}_0000.nii.gz").dataobj)
    label = np.asarray(nib.load(root / "labelsTr" / f"{case}.nii.gz").dataobj)
    background = image[(label == 0) & (image != 0)].mean()
    return image[label == 1].mean() - background, image[label == 2].mean() - background


def test_the_target_is_the_source_s_anatomy_at_a_third_of_its_contrast_split_into_few_training_cases(transfer,
                                                                                                      tmp_path):
    target = write_blob_dataset(tmp_path / "target", 6, transfer.TARGET_SEED, transfer.TARGET_CONTRAST)
    source = write_blob_dataset(tmp_path / "source", 1)
    np.testing.assert_allclose(blob_contrast(source, "case0"), (60, -50), atol=3)
    np.testing.assert_allclose(blob_contrast(target, "case0"), (20, -16.7), atol=3)
    splits = transfer.target_splits(target, 2, 2)
    assert splits == json.loads((target / "splits_final.json").read_text())
    assert [s["train"] for s in splits] == [["case0", "case1"], ["case2", "case3"]]
    assert all(sorted(s["train"] + s["val"]) == [f"case{i}" for i in range(6)] for s in splits)


def test_from_scratch_is_the_source_s_network_freshly_initialized_in_a_folder_of_its_own(transfer, nnunet_model,
                                                                                          tmp_path):
    from segnet.inference.nnunet_model import load_nnunet

    source = load_nnunet(nnunet_model.checkpoint, torch.device("cpu")).net.state_dict()
    starts = [transfer.scratch_model(nnunet_model.folder / "fold_0", tmp_path / f"scratch{seed}", seed)
              for seed in (0, 0, 1)]
    weights = [load_nnunet(fold / "checkpoint_final.pth", torch.device("cpu")).net.state_dict() for fold in starts]
    assert all({k: v.shape for k, v in w.items()} == {k: v.shape for k, v in source.items()} for w in weights)
    convolution = next(name for name, value in source.items() if value.dim() == 5)
    assert not torch.equal(weights[0][convolution], source[convolution])  # not the source's weights
    assert torch.equal(weights[0][convolution], weights[1][convolution])  # seeded
    assert not torch.equal(weights[0][convolution], weights[2][convolution])  # each fold its own start


def test_the_table_compares_each_start_and_each_placement_per_case(transfer, tmp_path):
    rows = []
    for variant, dice in {"fine-tuned, edges": 0.9, "fine-tuned, none": 0.9, "scratch, edges": 0.5,
                          "scratch, none": 0.5}.items():
        for case in range(8):
            value = dice + 0.01 * case  # the same per-case spread on every side: the differences are exact
            rows += [{"variant": variant, "fold": 0, "seed": 0, "case": f"case{case}", "class": "bright",
                      "metric": metric, "value": value} for metric in transfer.METRICS]
    text = transfer.report(rows, {"target_cases": 10, "folds": 1, "train_cases": 2, "steps": 5}, tmp_path)
    compared = json.loads((tmp_path / "transfer.json").read_text())["comparisons"]
    dice = {(c["variant"], c["baseline"]): c for c in compared if c["metric"] == "Dice"}
    assert dice["fine-tuned, edges", "scratch, edges"]["mean_difference"] == pytest.approx(0.4)
    assert dice["fine-tuned, edges", "scratch, edges"]["verdict"].startswith("better")
    assert dice["fine-tuned, edges", "fine-tuned, none"]["mean_difference"] == pytest.approx(0)
    assert "| fine-tuned, none | scratch, none | Dice | 8 | +0.4000 |" in text
