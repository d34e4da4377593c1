"""What segnet-evaluate shows beside its numbers: per foreground class, the worst, the median and
the best case by Dice, each as the slice through the class's centre of mass (along the last
axis) of its image, with the label's outline (green) and the prediction's (red), so that a user
looks at the cases before reading the means. Written as cases_<class>.png into the report folder."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure  # drawn without pyplot: no backend chosen for the process
from scipy import ndimage

from segnet.data.dataset_json import image_stem
from segnet.data.formats import is_natural
from segnet.data.image_files import read_array
from segnet.files import atomic_path

RANKS = ("worst", "median", "best")


def ranked_cases(summary: dict[str, Any], label: str) -> dict[str, dict[str, Any]]:
    """{worst, median, best: that case's summary entry} by the class's Dice (cases that have no
    Dice for it, an empty label and prediction, are left out); empty when none has one."""
    scored = [case for case in summary["metric_per_case"]
              if case["metrics"] is not None and not math.isnan(case["metrics"][label]["Dice"])]
    scored.sort(key=lambda case: case["metrics"][label]["Dice"])
    if not scored:
        return {}
    return dict(zip(RANKS, (scored[0], scored[(len(scored) - 1) // 2], scored[-1]), strict=True))


def centre_slice(label: np.ndarray, prediction: np.ndarray, value: int) -> int:
    """The index along the last axis through the class's centre of mass in the label (else the
    prediction's, else the middle)."""
    for mask in (label == value, prediction == value):
        if mask.any():
            return int(round(ndimage.center_of_mass(mask)[-1]))
    return label.shape[-1] // 2


def _plane(array: np.ndarray, index: int, natural: bool) -> np.ndarray:
    plane = array[..., index] if array.ndim == 3 else array
    # A scan's rows up the second axis, as viewers show an axial slice; a photograph as stored.
    return plane if natural else plane.T


def draw_case(axis, case: dict[str, Any], label: str, rank: str) -> None:
    value = int(label)
    first_image = case["image"] if isinstance(case["image"], str) else case["image"][0]
    natural = is_natural(first_image)
    image = read_array(first_image)
    reference = read_array(case["reference_file"])
    prediction = read_array(case["prediction_file"])
    image = image[..., 0] if image.ndim == 4 else image
    index = centre_slice(reference, prediction, value)
    axis.imshow(_plane(image, index, natural), cmap="gray", origin="upper" if natural else "lower")
    for mask, colour in ((reference == value, "lime"), (prediction == value, "red")):
        plane = _plane(mask, index, natural).astype(float)
        if plane.any():
            axis.contour(plane, levels=[0.5], colors=colour, linewidths=0.8)
    name = image_stem(case["prediction_file"])
    axis.set_title(f"{rank}: {name}\nDice {case['metrics'][label]['Dice']:.3f}, slice {index}", fontsize=8)
    axis.set_axis_off()


def write_case_pictures(summary: dict[str, Any], output_dir: Path) -> list[Path]:
    """One picture per foreground class with a scored case; the files written."""
    written = []
    for label, mean in summary["mean"].items():
        chosen = ranked_cases(summary, label)
        if not chosen:
            continue
        figure = Figure(figsize=(3.2 * len(chosen), 3.6))
        axes = figure.subplots(1, len(chosen))
        for axis, (rank, case) in zip(np.atleast_1d(axes), chosen.items(), strict=True):
            draw_case(axis, case, label, rank)
        figure.suptitle(f"{mean['name']}: label green, prediction red", fontsize=9)
        figure.tight_layout()
        path = output_dir / f"cases_{mean['name']}.png"
        with atomic_path(path) as temporary:
            figure.savefig(temporary, dpi=110, format="png")
        written.append(path)
    return written
