"""scripts/uncertainty_evidence.py's parts: the corruptions, the held-out heads, the calibration
sums of a saved prediction, the pooled change with its bootstrap interval, and the AUROC. End to
end it trains five folds for minutes: its results are docs/results/uncertainty.md."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import script_module
from segnet.evaluation.calibration import Calibration
from segnet.generated.heads import heads_case
from segnet.generated.phantom import write_case


@pytest.fixture(scope="module")
def evidence():
    return script_module("uncertainty_evidence")


@pytest.fixture(scope="module")
def head():
    case = heads_case(3, 0)
    return case.image.astype(np.float32), case.label


def test_the_corruptions_change_what_they_name_and_keep_the_labels_where_the_image_stays(evidence, head):
    image, label = head
    rng = np.random.default_rng(0)
    noisy, same = evidence.noise(image, label, rng)
    assert same is label
    assert (noisy - image).std() == pytest.approx(evidence.NOISE * image[label > 0].std(), rel=0.02)
    blurred, _ = evidence.blur(image, label, rng)
    assert np.abs(np.diff(blurred, axis=0)).mean() < 0.5 * np.abs(np.diff(image, axis=0)).mean()
    one_slice = np.zeros_like(image)
    one_slice[..., 2] = image[..., 2]
    assert np.all(evidence.blur(one_slice, label, rng)[0][..., [0, 1, 3]] == 0)  # in-plane: slices stay apart
    assert np.array_equal(evidence.scale(image, label, rng)[0], image * evidence.SCALE)


def test_the_cropped_field_of_view_cuts_through_the_head_image_and_label_alike(evidence, head):
    image, label = head
    rows = np.flatnonzero(label.any((1, 2)))
    for seed in range(5):
        kept_image, kept_label = evidence.cropped(image, label, np.random.default_rng(seed))
        assert kept_image.shape == kept_label.shape == (int(evidence.KEPT * (rows[-1] + 1 - rows[0])), *image.shape[1:])
        start = next(i for i in range(image.shape[0]) if np.array_equal(image[i], kept_image[0]))
        assert rows[0] <= start and start + len(kept_image) <= rows[-1] + 1
        assert np.array_equal(kept_label, label[start:start + len(kept_label)])


def test_the_held_out_heads_are_other_heads_than_the_training_heads(evidence, tmp_path):
    import nibabel as nib

    root = evidence.held_out_heads(tmp_path, 2)
    held_out = np.asarray(nib.load(root / "imagesTr" / "test_000.nii.gz").dataobj)
    training = heads_case(0, 0).image
    assert held_out.shape != training.shape or not np.array_equal(held_out, training)
    assert np.array_equal(held_out, heads_case(0, evidence.TEST_SEED).image)


def test_a_saved_prediction_s_calibration_sums_and_nll_everywhere_and_near_the_structures(evidence, tmp_path):
    label = np.zeros((12, 4, 2), np.uint8)
    label[:2] = 1
    label[3, 3] = 2
    write_case(tmp_path, "case", [label.astype(np.float32)], label)
    probabilities = np.zeros((3, *label.shape))
    probabilities[0] = 0.5
    probabilities[1] = 0.5  # right where the label is 0 or 1, wrong at the two voxels of class 2: argmax 0
    (tmp_path / "predicted").mkdir()
    np.savez(tmp_path / "predicted" / "case.npz", probabilities=probabilities)
    found = evidence.case_calibration(tmp_path / "predicted", tmp_path, "case")
    sums, nll, voxels = found["every voxel"]
    assert voxels == label.size
    assert nll == pytest.approx(94 * np.log(2) + 2 * -np.log(1e-7))
    expected = Calibration.of(probabilities, label.astype(np.int64), [(1,), (2,)])
    assert np.array_equal(sums.hits, expected.hits) and sums.foreground_ece() == expected.foreground_ece()
    near, near_nll, near_voxels = found[evidence.SCORED[1]]  # rows 0 to 6: NEAR rows beyond the labels' last
    assert near_voxels == 7 * 4 * 2 and near.voxels.sum(1).tolist() == [near_voxels, near_voxels]
    assert near_nll == pytest.approx(54 * np.log(2) + 2 * -np.log(1e-7))


def calibrated_case(rng: np.random.Generator, sharpen: float) -> tuple[Calibration, float, int]:
    """A case whose class-1 probability p is right on average, reported as p sharpened (1: calibrated)."""
    p = rng.uniform(0.05, 0.95, 4000)
    label = (rng.uniform(size=p.size) < p).astype(np.int64)
    said = p**sharpen / (p**sharpen + (1 - p) ** sharpen)
    probabilities = np.stack([1 - said, said])
    truth = probabilities[label, np.arange(p.size)]
    return Calibration.of(probabilities, label, [(1,)]), float(-np.log(truth).sum()), p.size


def test_the_pooled_change_and_its_interval_say_which_way_calibration_moved(evidence):
    rng = np.random.default_rng(0)
    overconfident = [calibrated_case(rng, 3.0) for _ in range(8)]
    calibrated = [calibrated_case(rng, 1.0) for _ in range(8)]
    row = evidence.calibration_row(overconfident, calibrated)
    assert row["cases"] == 8
    for metric in ("ECE", "Brier", "NLL"):
        assert row[metric]["after"] < row[metric]["before"]
        assert row[metric]["ci_low"] <= row[metric]["ci_high"] < 0
    assert row["ECE"]["after"] < 0.03 < 0.1 < row["ECE"]["before"]


def test_auroc_is_the_chance_that_a_positive_scores_above_a_negative(evidence):
    assert evidence.auroc([0.9, 0.8], [0.1, 0.2, 0.3]) == 1.0
    assert evidence.auroc([0.1, 0.2], [0.8, 0.9]) == 0.0
    assert evidence.auroc([0.5, 0.5], [0.5, 0.5]) == 0.5
    assert evidence.auroc([0.4, 0.9], [0.5, 0.6]) == 0.5


def test_disagreement_averages_the_mutual_information_where_the_score_looks(evidence, tmp_path):
    probabilities = np.zeros((3, 4, 1, 1))
    probabilities[:, 0, 0, 0] = [1.0, 0.0, 0.0]  # sure background: not counted
    probabilities[:, 1, 0, 0] = [0.0, 1.0, 0.0]  # labelled class 1, sure
    probabilities[:, 2, 0, 0] = [0.5, 0.5, 0.0]  # uncertain for class 1
    probabilities[:, 3, 0, 0] = [0.95, 0.0, 0.05]  # background, sure enough for each class
    information = np.array([0.9, 0.2, 0.4, 0.8]).reshape(4, 1, 1)
    np.savez(tmp_path / "case.npz", probabilities=probabilities)
    np.savez(tmp_path / "case_uncertainty.npz", mutual_information=information)
    assert evidence.disagreement(tmp_path, "case") == pytest.approx(0.3)
    np.savez(tmp_path / "case.npz", probabilities=probabilities[:, [0]])
    assert evidence.disagreement(tmp_path, "case") == 0.0  # nothing labelled or uncertain


def test_random_splits_validate_each_head_once_and_mix_the_regions(evidence, tmp_path):
    import json

    (tmp_path / "labelsTr").mkdir()
    names = [f"heads_{i:03d}" for i in range(20)]
    for name in names:
        (tmp_path / "labelsTr" / f"{name}.nii.gz").touch()
    evidence.write_random_splits(tmp_path)
    splits = json.loads((tmp_path / "splits_final.json").read_text())
    assert len(splits) == evidence.FOLDS
    assert sorted(name for split in splits for name in split["val"]) == names
    for split in splits:
        assert sorted(split["train"] + split["val"]) == names and not set(split["train"]) & set(split["val"])
    regions = [{int(name[-3:]) % evidence.FOLDS for name in split["val"]} for split in splits]
    assert any(len(found) > 1 for found in regions)  # the generator's folds hold one region each
