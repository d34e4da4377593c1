"""Region-based labels as nnU-Net v2 reads them (BraTS's whole tumour, tumour core, enhancing):
dataset.json, the masks and the label map of the regions, nnU-Net's region loss, crops centred in
the regions, per-region scores on constructed cases, and training and prediction end to end."""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from monai.losses import SoftclDiceLoss

from helpers.training import TINY_MODEL, TINY_TRAINER, compose_config
from segnet.data.dataset_json import describe_dataset
from segnet.data.regions import Regions
from segnet.data.samples import FOREGROUND_SHARE
from segnet.errors import DatasetError
from segnet.evaluation.evaluator import score_case
from segnet.generated.phantom import save_nifti
from segnet.generated.tumour import write_tumour_dataset
from segnet.inference.predict import predict_command
from segnet.model.dice_ce import RegionLoss
from segnet.model.loss_terms import TrainingLoss
from segnet.postprocessing.postprocess import postprocess_command
from segnet.preprocessing.datasets import CropDataset

BRATS = Regions(values=((1, 2, 3), (2, 3), (3,)), class_order=(1, 2, 3))


def test_dataset_json_regions_are_read_with_their_names_and_class_order(tmp_path):
    root = write_tumour_dataset(tmp_path / "tumour", cases=2, size=16)
    description = describe_dataset(str(root))
    assert description.class_names == ("background", "whole_tumor", "tumor_core", "enhancing_tumor")
    assert description.regions == BRATS and description.label_values == (0, 1, 2, 3)
    assert description.regions_settings == {"values": [[1, 2, 3], [2, 3], [3]], "class_order": [1, 2, 3]}
    spec = json.loads((root / "dataset.json").read_text())
    del spec["regions_class_order"]
    (root / "dataset.json").write_text(json.dumps(spec))
    describe_dataset.cache_clear()
    with pytest.raises(DatasetError, match='region-based labels need "regions_class_order": one label value > 0 per '
                                           r"region \(whole_tumor, tumor_core, enhancing_tumor\)"):
        describe_dataset(str(root))
    (root / "dataset.json").write_text(json.dumps({**spec, "regions_class_order": [1, 2, 3],
                                                   "labels": {**spec["labels"], "ignore": 2}}))
    describe_dataset.cache_clear()
    with pytest.raises(DatasetError, match=r'the "ignore" label \(2\) must have a higher value than every region'):
        describe_dataset(str(root))


def test_masks_and_label_map_paint_nested_regions_in_their_class_order():
    label = torch.tensor([[[0, 1, 2, 3]]])
    assert BRATS.masks(label).tolist() == [[[0, 1, 1, 1], [0, 0, 1, 1], [0, 0, 0, 1]]]
    probabilities = torch.tensor([[0.1, 0.9, 0.9, 0.9, 0.2],   # whole tumour
                                  [0.1, 0.2, 0.8, 0.7, 0.9],   # tumour core (the last voxel outside the whole)
                                  [0.1, 0.1, 0.3, 0.6, 0.1]])  # enhancing
    # painted in order: a core voxel the whole tumour misses is still core
    assert BRATS.label_map(probabilities).tolist() == [0, 1, 2, 3, 2]
    assert BRATS.label_map(probabilities.numpy()).tolist() == [0, 1, 2, 3, 2]
    assert Regions(((1, 2, 3), (2, 3)), (3, 2)).label_map(probabilities[:2]).tolist() == [0, 3, 2, 2, 2]


def test_region_loss_is_dice_plus_binary_cross_entropy_per_region_and_leaves_out_ignored_voxels():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 6, 5)
    label = torch.randint(0, 4, (2, 1, 6, 5)).float()
    target = BRATS.masks(label)
    probabilities = logits.sigmoid()
    overlap, total = (probabilities * target).sum((2, 3)), (probabilities + target).sum((2, 3))
    dice = 1 - (2 * overlap + 1e-5) / (total + 1e-5)
    expected = dice.mean() + F.binary_cross_entropy_with_logits(logits, target)
    assert RegionLoss(BRATS)(logits, label).item() == pytest.approx(expected.item(), rel=1e-5)
    ignored = label.clone()
    ignored[:, :, :2] = 4
    changed = logits.clone()
    changed[:, :, :2] = -logits[:, :, :2]  # other logits where the label is unknown
    loss = RegionLoss(BRATS, ignore_label=4)
    assert loss(changed, ignored).item() == pytest.approx(loss(logits, ignored).item(), rel=1e-6)
    assert loss(logits, ignored).item() != pytest.approx(RegionLoss(BRATS)(logits, label).item(), rel=1e-3)


def one_region_at_a_time(logits: torch.Tensor, label: torch.Tensor, region: int, ignore_label: int | None):
    """Region `region` of a BraTS batch as a problem of two classes: a softmax over (0, its logit)
    is its sigmoid, its mask the label (the ignore label kept, as 2)."""
    binary = BRATS.masks(label)[:, region : region + 1]
    if ignore_label is not None:
        binary[label == ignore_label] = 2
    return torch.cat([torch.zeros_like(logits[:, :1]), logits[:, region : region + 1]], dim=1), binary


def alone(term: str) -> dict:
    return {"dice_ce": {"weight": 0.0}, term: {"weight": 1.0}, "ramp_steps": 0}


@pytest.mark.parametrize("ignore_label", [None, 4])
def test_the_other_loss_terms_score_each_region_s_sigmoid_as_a_class_of_its_own(ignore_label):
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 3, 12, 10, dtype=torch.float64, generator=generator)
    label = torch.randint(0, 4, (2, 1, 12, 10), generator=generator).double()
    if ignore_label is not None:
        label[..., :3, :] = ignore_label
    spacing = [[1.0, 1.0]] * 2
    maps = {"distance": torch.randn(2, 3, 12, 10, dtype=torch.float64, generator=generator),
            "skeleton": BRATS.masks(label)}  # any 0/1 map per region will do as the skeletons
    terms = ["edge", "boundary", "skeleton_recall"] + (["hausdorff_dt"] if ignore_label is None else [])
    for term in terms:
        value = TrainingLoss(alone(term), 4, ignore_label, 1, "python", BRATS)(logits, label, 0, spacing, maps)
        binary = TrainingLoss(alone(term), 2, None if ignore_label is None else 2, 1, "python")
        per_region = [binary(*one_region_at_a_time(logits, label, region, ignore_label), 0, spacing,
                             {kind: array[:, region : region + 1] for kind, array in maps.items()})[term]
                      for region in range(3)]
        assert value[term].item() == pytest.approx(torch.stack(per_region).mean().item(), rel=1e-9), term
    if ignore_label is None:  # clDice sums over the channels before its ratio: MONAI's own, on the sigmoids
        cldice = TrainingLoss(alone("cldice"), 4, None, 1, "python", BRATS)(logits, label, 0, spacing)["cldice"]
        expected = SoftclDiceLoss(iter_=3, sigmoid=True)(logits, BRATS.masks(label).double())
        assert cldice.item() == pytest.approx(expected.item(), rel=1e-9)


def test_crops_pick_a_region_then_a_voxel_of_it(tmp_path):
    # value 1 at x = 0, value 2 at x = 1; regions {1, 2} and {2}: a region first, then a voxel of
    # it, gives value 2 three times in four (a class first would give it one time in two)
    rows = [(value, value - 1, y, 5) for value in (1, 2) for y in range(40)]
    foreground = np.array(rows, np.int32)
    crops = CropDataset([], [4, 4, 4], 1, regions=[(1, 2), (2,)]).set_random_state(0)
    centres = [tuple(crops.centre((50, 50, 50), foreground)) for _ in range(3000)]
    chosen = [x for x, _, z in centres if z == 5 and x in (0, 1)]
    assert len(chosen) / len(centres) == pytest.approx(FOREGROUND_SHARE, abs=0.03)
    assert sum(x == 1 for x in chosen) / len(chosen) == pytest.approx(0.75, abs=0.03)
    only_one = CropDataset([], [4, 4, 4], 1, regions=[(1, 2), (3,)]).set_random_state(0)  # region 3 absent
    assert all(only_one.centre((50, 50, 50), foreground) is not None for _ in range(50))


def test_regions_are_scored_by_name_on_their_values_in_both_label_maps(tmp_path):
    reference = np.zeros((4, 4, 1), np.uint8)
    reference[0, :3] = 1
    reference[1, :2] = 2
    reference[2, :1] = 3  # whole tumour 6 voxels, core 3, enhancing 1
    prediction = reference.copy()
    prediction[1, :2] = 3  # the core's necrosis called enhancing: whole and core unchanged
    save_nifti(tmp_path / "reference.nii.gz", reference)
    names = ["background", "whole_tumor", "tumor_core", "enhancing_tumor"]
    scores = score_case(prediction, str(tmp_path / "reference.nii.gz"), names, regions=BRATS)
    assert [scores[c]["name"] for c in "123"] == names[1:]
    assert [scores[c]["Dice"] for c in "123"] == pytest.approx([1.0, 1.0, 2 * 1 / (3 + 1)])
    assert [scores[c]["n_ref"] for c in "123"] == [6, 3, 1]
    by_class = score_case(prediction, str(tmp_path / "reference.nii.gz"), ["background", "a", "b", "c"])
    assert by_class["2"]["Dice"] == 0.0  # as classes, value 2 is missed entirely


def ignore_the_first_rows(root, value: int = 4) -> None:
    """A region dataset annotated partially: label `value`, named "ignore", on each case's first rows."""
    description = json.loads((root / "dataset.json").read_text())
    description["labels"]["ignore"] = value
    (root / "dataset.json").write_text(json.dumps(description))
    for path in (root / "labelsTr").glob("*.nii.gz"):
        image = nib.load(path)
        label = np.asarray(image.dataobj).copy()
        label[:3] = value
        nib.save(nib.Nifti1Image(label, image.affine), path)


# 2D: with an ignore label and the boundary term on per-region distance maps; 3D: with the edge term
@pytest.mark.parametrize("dims,loss", [(2, "boundary"), (3, "edge")])
def test_a_region_dataset_trains_and_predicts_label_maps_and_region_probabilities(tmp_path, dims, loss):
    from segnet.training.train import train

    root = write_tumour_dataset(tmp_path / "tumour", cases=4, size=16)
    if dims == 2:
        ignore_the_first_rows(root)
    run = tmp_path / "run"
    patch = "[16,16]" if dims == 2 else "[16,16,8]"
    train(compose_config(["data=folder", f"data.root={root}", f"data.spatial_dims={dims}", "data.num_folds=2",
                          "data.num_workers=0", "op=python", "data.steps_per_epoch=2", f"data.patch_size={patch}",
                          f"data.cache_dir={tmp_path / 'cache'}", f"loss={loss}", "loss.ramp_steps=0",
                          *TINY_MODEL, *TINY_TRAINER], output_dir=run))
    metrics = json.loads((run / "metrics.json").read_text())
    assert list(metrics["val_dice_per_class"]) == ["whole_tumor", "tumor_core", "enhancing_tumor"]
    assert all(np.isfinite(list(metrics["val_dice_per_class"].values())))
    distances = sorted((tmp_path / "cache").rglob("*.distance2d.npy"))
    if dims == 2:  # one channel per region, the ignored rows in none
        image = np.load(distances[0].parent.parent / distances[0].name.replace("distance2d", "image"), mmap_mode="r")
        assert len(distances) == 4 and np.load(distances[0]).shape == (3, *image.shape[1:])  # on the cached grid
        # segnet-postprocess decides a rule per region, in turn, and names each trial
        record = postprocess_command(compose_config([f"data.root={root}", f"runs=[{run}]", "tta=false", "op=python"],
                                                    output_dir=tmp_path / "decided", name="postprocess"))
        regions = [f"largest component of {name}" for name in ("whole_tumor", "tumor_core", "enhancing_tumor")]
        trials = record["decided_on"]["mean_dice_per_class"]
        assert list(trials) == ["none", "foreground", *regions, "chosen"]
        assert all(list(means) == ["whole_tumor", "tumor_core", "enhancing_tumor"] for means in trials.values())
        assert set(map(tuple, record["regions_largest_component"])) <= set(BRATS.values)
    out = tmp_path / "out"
    predict_command(compose_config([f"ckpt_path={run}/checkpoints/final.ckpt", f"input={root / 'imagesTr'}",
                                    f"output={out}", "op=python", "save_probabilities=true"], name="predict"))
    saved = np.load(out / "tumour_000.npz")
    assert saved["class_names"].tolist() == ["whole_tumor", "tumor_core", "enhancing_tumor"]
    probabilities = saved["probabilities"]
    assert probabilities.shape == (3, 16, 16, 8) and probabilities.min() >= 0 and probabilities.max() <= 1
    written = np.asarray(nib.load(out / "tumour_000.nii.gz").dataobj)
    assert np.array_equal(written, BRATS.label_map(probabilities))  # the written map is its regions painted
    final = run / "checkpoints" / "final.ckpt"
    image = root / "imagesTr" / "tumour_000_0000.nii.gz"
    predict_command(compose_config([f"ckpt_path=[{final},{final}]", f"input={image}", f"output={tmp_path / 'twice'}",
                                    "op=python", "save_probabilities=true"], name="predict"))
    twice = np.load(tmp_path / "twice" / "tumour_000.npz")["probabilities"]
    assert np.allclose(twice, probabilities, atol=1e-6)  # an ensemble averages its models' sigmoids
