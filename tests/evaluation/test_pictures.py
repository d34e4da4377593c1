"""segnet-evaluate's pictures (segnet.evaluation.pictures): per class the worst, median and best
case by Dice, each drawn at the slice through the class."""

from __future__ import annotations

import math

import matplotlib.image
import numpy as np

from segnet.evaluation.pictures import case_figure, centre_slice, ranked_cases, write_case_pictures
from segnet.generated.phantom import save_nifti


def entry(name: str, dice: float, folder=None) -> dict:
    files = {key: str(folder / f"{name}_{key}.nii.gz") if folder else key for key in ("image", "label", "pred")}
    return {"image": files["image"], "reference_file": files["label"], "prediction_file": files["pred"],
            "metrics": {"1": {"name": "core", "Dice": dice}}}


def test_the_worst_median_and_best_by_dice_leaving_out_cases_without_one():
    cases = [entry(n, d) for n, d in [("a", 0.9), ("b", math.nan), ("c", 0.2), ("d", 0.5), ("e", 0.7)]]
    summary = {"metric_per_case": cases + [{**entry("f", 0.0), "metrics": None}], "mean": {"1": {"name": "core"}}}
    chosen = ranked_cases(summary, "1")
    assert {rank: case["metrics"]["1"]["Dice"] for rank, case in chosen.items()} == {
        "worst": 0.2, "median": 0.5, "best": 0.9}  # the lower middle of four
    assert ranked_cases({"metric_per_case": [entry("b", math.nan)]}, "1") == {}


def test_the_slice_goes_through_the_class():
    label, prediction = np.zeros((8, 8, 12), np.uint8), np.zeros((8, 8, 12), np.uint8)
    label[2:5, 2:5, 6:9] = 1
    prediction[:, :, 2] = 2
    assert centre_slice(label, prediction, 1) == 7
    assert centre_slice(label, prediction, 2) == 2  # absent from the label: the prediction's
    assert centre_slice(label, prediction, 3) == 6  # in neither: the middle


def three_cases(folder, stem: str = "c") -> list[dict]:
    """Cases of Dice 0.3, 0.6 and 0.9 written into `folder`: image, label and prediction files."""
    rng = np.random.default_rng(0)
    cases = []
    for i, dice in enumerate([0.3, 0.6, 0.9]):
        label = np.zeros((24, 24, 5), np.uint8)
        label[6:18, 6:18, 1:4] = 1
        save_nifti(folder / f"{stem}{i}_image.nii.gz", rng.normal(size=label.shape).astype(np.float32))
        save_nifti(folder / f"{stem}{i}_label.nii.gz", label)
        save_nifti(folder / f"{stem}{i}_pred.nii.gz", np.roll(label, 3 - i, axis=0))
        cases.append(entry(f"{stem}{i}", dice, folder))
    return cases


def test_one_picture_per_class_with_the_outlines_drawn(tmp_path):
    cases = three_cases(tmp_path)
    summary = {"metric_per_case": cases, "mean": {"1": {"name": "core"}, "2": {"name": "rim"}}}
    for case in cases:
        case["metrics"]["2"] = {"name": "rim", "Dice": math.nan}  # never scored: no picture
    written = write_case_pictures(summary, tmp_path)
    assert [p.name for p in written] == ["cases_core.png"]
    pixels = matplotlib.image.imread(written[0])[..., :3]
    green = (pixels[..., 1] > 0.8) & (pixels[..., 0] < 0.3) & (pixels[..., 2] < 0.3)
    red = (pixels[..., 0] > 0.8) & (pixels[..., 1] < 0.3) & (pixels[..., 2] < 0.3)
    assert green.sum() > 50 and red.sum() > 50  # both outlines are drawn


def test_long_case_names_wrap_and_no_title_overlaps_another(tmp_path):
    stem = "Dataset137_BraTS2021_BraTS2021_00123_flair_resampled_to_1mm_isotropic_"
    summary = {"metric_per_case": three_cases(tmp_path, stem), "mean": {"1": {"name": "core"}}}
    figure = case_figure(ranked_cases(summary, "1"), "1", "core")
    figure.draw_without_rendering()
    boxes = [axis.title.get_window_extent() for axis in figure.axes] + [figure._suptitle.get_window_extent()]
    assert all(len(axis.title.get_text().splitlines()) == 3 for axis in figure.axes)  # the rank's line, the name's two
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
