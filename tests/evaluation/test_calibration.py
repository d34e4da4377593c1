"""segnet-evaluate's calibration (segnet.evaluation.calibration): ECE and Brier numbers worked
out by hand, summed over cases, in summary.json and drawn as reliability.png."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from segnet.data.dataset_json import Case
from segnet.evaluation.calibration import BINS, Calibration
from segnet.evaluation.evaluator import CaseResult, summarize
from segnet.evaluation.pictures import write_reliability_picture

UNITS = [(1,), (2,)]


def probabilities_and_reference() -> tuple[np.ndarray, np.ndarray]:
    """Eight voxels: class 1 at 0.9 on four (three of them class 1), at 0.1 on four (one of them);
    class 2 at 0 everywhere and absent."""
    p1 = np.array([0.9] * 4 + [0.1] * 4)
    probabilities = np.stack([1 - p1, p1, np.zeros(8)])
    return probabilities, np.array([1, 1, 1, 0, 1, 0, 0, 0])


def test_ece_and_brier_are_the_hand_worked_numbers():
    calibration = Calibration.of(*probabilities_and_reference(), UNITS)
    # the 0.9 bin: 3 hits for 3.6 expected; the 0.1 bin: 1 for 0.4; over 8 voxels (one bin would make it 0)
    assert calibration.ece() == pytest.approx([(0.6 + 0.6) / 8, 0.0])
    assert calibration.foreground_ece() == pytest.approx(1.2 / 16)  # both classes' voxels pooled
    # ((0.1^2 * 3 + 0.9^2) * 2) / 8, and 0 for the class absent and given 0
    assert calibration.brier() == pytest.approx([1.68 / 8, 0.0])
    assert calibration.voxels.shape == (2, BINS) and calibration.voxels[0, 13] == 4  # 0.9 lies in bin 13 of 15


def test_ignored_voxels_are_left_out_and_cases_add_up():
    probabilities, reference = probabilities_and_reference()
    with_ignored = np.concatenate([reference, [9]])  # a voxel of the ignore label, given certainty that is wrong
    calibration = Calibration.of(np.concatenate([probabilities, [[0.0], [1.0], [0.0]]], 1), with_ignored, UNITS, 9)
    assert calibration.ece()[0] == pytest.approx(1.2 / 8)
    both = Calibration.of(*probabilities_and_reference(), UNITS) + Calibration.of(*probabilities_and_reference(), UNITS)
    assert both.ece() == pytest.approx(calibration.ece()) and both.voxels.sum() == 32


def test_the_summary_carries_calibration_and_the_picture_is_drawn(tmp_path: Path):
    calibration = Calibration.of(*probabilities_and_reference(), UNITS)
    metrics = {str(c): {"name": name, "Dice": 1.0} for c, name in ((1, "core"), (2, "shell"))}
    results = [CaseResult(Case("a", ("a.nii.gz",), "a_label.nii.gz"), tmp_path / "a.nii.gz", metrics, None, calibration)
               for _ in range(2)]
    summary = summarize(results, ["background", "core", "shell"])["calibration"]
    assert summary["per_class"]["1"]["name"] == "core" and summary["per_class"]["1"]["ECE"] == pytest.approx(0.15)
    assert summary["per_class"]["1"]["Brier"] == pytest.approx(0.21)
    assert summary["foreground"] == pytest.approx({"ECE": 0.075, "Brier": 0.105})
    assert summary["per_class"]["1"]["reliability"] == {"probability": pytest.approx([0.1, 0.9]),
                                                        "frequency": pytest.approx([0.25, 0.75]), "voxels": [8, 8]}
    assert "15 equal-width bins" in summary["binning"]
    path = write_reliability_picture({"calibration": summary}, tmp_path)
    assert path == tmp_path / "reliability.png" and path.stat().st_size > 5000


def test_regions_are_scored_on_their_own_channels_against_the_values_they_cover():
    # regions (1, 2) and (2,), no background channel: sure and right on the first, sure and wrong on the second
    reference = np.array([0, 1, 2, 2])
    probabilities = np.array([[0.0, 1.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0]])
    calibration = Calibration.of(probabilities, reference, [(1, 2), (2,)])
    assert calibration.ece() == pytest.approx([0.0, 0.25]) and calibration.brier() == pytest.approx([0.0, 0.25])
