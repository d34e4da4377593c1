"""nnU-Net's ignore label: not a class, left out of the loss and of every metric."""

from __future__ import annotations

import json
import math

import nibabel as nib
import numpy as np
import pytest
import torch

from helpers.data import write_decathlon
from helpers.training import TINY_MODEL, TINY_TRAINER, compose_config
from segnet.data.dataset_json import describe_dataset
from segnet.data.transforms import case_dicts, train_transforms
from segnet.errors import DatasetError
from segnet.evaluation.evaluator import score_case
from segnet.model.dice_ce import SegmentationLoss
from segnet.preprocessing.datasets import CropDataset
from segnet.preprocessing.preprocess import preprocess
from segnet.training.train import train


def with_ignore(root, value=3):
    """The tiny dataset with "ignore" as label 3, painted over the first rows of every label."""
    spec = json.loads((root / "dataset.json").read_text())
    spec["labels"][str(value)] = "ignore"
    (root / "dataset.json").write_text(json.dumps(spec))
    for path in (root / "labelsTr").iterdir():
        image = nib.load(path)
        label = np.asarray(image.dataobj).copy()
        label[:, :6] = value  # half of the shell is unknown
        nib.save(nib.Nifti1Image(label, image.affine), str(path))
    return root


def test_ignore_is_read_from_dataset_json_and_is_not_a_class(tmp_path):
    description = describe_dataset(str(with_ignore(write_decathlon(tmp_path / "Task", cases=2))))
    assert description.class_names == ("background", "core", "shell") and description.ignore_label == 3
    assert description.num_classes == 3
    spec = json.loads((tmp_path / "Task" / "dataset.json").read_text())
    spec["labels"] = {"0": "background", "1": "ignore", "2": "core"}
    (tmp_path / "Task" / "dataset.json").write_text(json.dumps(spec))
    describe_dataset.cache_clear()
    with pytest.raises(DatasetError, match='"ignore" label must have the highest value'):
        describe_dataset(str(tmp_path / "Task"))


def test_loss_sees_only_known_voxels():
    torch.manual_seed(0)
    label = torch.randint(0, 3, (2, 1, 8, 8))
    label[:, :, :3] = 3
    logits = torch.randn(2, 3, 8, 8, requires_grad=True)
    loss = SegmentationLoss(ignore_label=3)(logits, label)
    (grad,) = torch.autograd.grad(loss, logits)
    ignored = (label == 3).expand_as(grad)
    assert grad[ignored].abs().max() == 0 and grad[~ignored].abs().max() > 0
    other = logits.detach().clone()
    other[ignored] = torch.randn(int(ignored.sum())) * 10  # anything there changes nothing
    assert SegmentationLoss(ignore_label=3)(other, label) == pytest.approx(loss.item(), rel=1e-6)
    assert SegmentationLoss(ignore_label=3)(logits, torch.full_like(label, 3)).item() == 0.0


def test_metrics_leave_ignored_voxels_out(tmp_path):
    reference = np.zeros((10, 10, 4), np.uint8)
    reference[2:6, 2:6] = 1
    reference[:, 8:] = 3  # ignored
    path = tmp_path / "ref.nii.gz"
    nib.save(nib.Nifti1Image(reference, np.eye(4)), str(path))
    prediction = np.where(reference == 3, 0, reference)
    wild = prediction.copy()
    wild[:, 8:] = 1  # predicting a class where the reference is unknown is no error
    clean = score_case(prediction, str(path), ["background", "core"], ignore_label=3)["1"]
    scored = score_case(wild, str(path), ["background", "core"], ignore_label=3)["1"]
    assert clean == scored and scored["Dice"] == 1.0 and scored["FP"] == 0 and scored["HD95"] == 0.0
    assert scored["TN"] == int((reference == 0).sum())  # the ignored voxels are not true negatives


@pytest.mark.slow
def test_training_with_an_ignore_label(tmp_path):
    root = with_ignore(write_decathlon(tmp_path / "Task", cases=3))
    metrics = train(compose_config(["data=folder", f"data.root={root}", "data.num_folds=3", "data.steps_per_epoch=2",
                                    "data.patch_size=[16,16,16]", "data.num_workers=0", "data.batch_size=1", "op=cpp",
                                    *TINY_MODEL, *TINY_TRAINER], output_dir=tmp_path / "run"))
    assert set(metrics["val_dice_per_class"]) == {"core", "shell"}
    assert not math.isnan(metrics["val_dice_mean"])


def test_crops_are_not_centred_on_ignored_voxels(tmp_path):
    description = describe_dataset(str(with_ignore(write_decathlon(tmp_path / "Task", cases=2))))
    geometry = {"orientation": "RAS", "spacing": None, "normalization": None}
    entries = list(preprocess(description, description.labelled, geometry, str(tmp_path / "cache")).values())
    ignored = np.mean([(e.label() == 3).mean() for e in entries])
    assert ignored > 0.2 and all(set(e.foreground()[:, 0]) == {1, 2} for e in entries)
    # every crop centred on the foreground, a crop of its centre
    centres = CropDataset(entries, [1, 1, 1], samples_per_volume=100, foreground_share=1.0).set_random_state(0)
    assert not any(s["label"].item() == 3 for i in range(len(entries)) for s in centres[i])
    # the chain that loads the sources (data.preprocessed=false): 1 of 3 crops anywhere, so on
    # ignored voxels a third of their share of the volume (more than half were, when they counted)
    chain = train_transforms([1, 1, 1], 3, 300, affine=False, ignore_label=3, **geometry)
    crops = [crop for case in case_dicts(description.labelled) for crop in chain.set_random_state(0)(case)]
    on_ignored = np.mean([crop["label"].item() == 3 for crop in crops])
    assert on_ignored < ignored / 3 + 0.05 and "crop_foreground" not in crops[0]
