"""What segnet-evaluate shows beside its numbers: per foreground class, the worst, the median and
the best case by Dice, each as the slice through the class's centre of mass (along the last
axis) of its image, with the label's outline (green) and the prediction's (red), so that a user
looks at the cases before reading the means. Written as cases_<class>.png into the report folder,
with reliability.png: the probabilities' reliability diagram (segnet.evaluation.calibration)."""

from __future__ import annotations

import math
import textwrap
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
PANEL_INCHES = 3.2
# The characters of a title line that fit a panel at TITLE_POINTS, with room to spare (a character
# taken as 0.7 of the font size wide): a longer case name wraps rather than runs into its
# neighbours' titles.
TITLE_POINTS = 8
TITLE_CHARACTERS = int(PANEL_INCHES * 72 / (0.7 * TITLE_POINTS))


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
    axis.set_title(case_title(rank, image_stem(case["prediction_file"]), case["metrics"][label]["Dice"], index),
                   fontsize=TITLE_POINTS)
    axis.set_axis_off()


def case_title(rank: str, name: str, dice: float, index: int) -> str:
    """The rank, the Dice and the slice, then the case's name wrapped to the panel's width."""
    wrapped = textwrap.wrap(name, TITLE_CHARACTERS, break_long_words=True, break_on_hyphens=False)
    return "\n".join([f"{rank}: Dice {dice:.3f}, slice {index}", *wrapped])


def case_figure(chosen: dict[str, dict[str, Any]], label: str, name: str) -> Figure:
    """The class's chosen cases side by side, under the class's name."""
    # constrained: the titles' lines and the heading get their room above the images, with twice
    # the default padding between them (the default lets a three-line title touch the heading)
    figure = Figure(figsize=(PANEL_INCHES * len(chosen), 3.8), layout="constrained")
    figure.get_layout_engine().set(h_pad=0.08)
    axes = figure.subplots(1, len(chosen))
    for axis, (rank, case) in zip(np.atleast_1d(axes), chosen.items(), strict=True):
        draw_case(axis, case, label, rank)
    figure.suptitle(f"{name}: label green, prediction red", fontsize=9)
    return figure


def write_case_pictures(summary: dict[str, Any], output_dir: Path) -> list[Path]:
    """One picture per foreground class with a scored case; the files written."""
    written = []
    for label, mean in summary["mean"].items():
        chosen = ranked_cases(summary, label)
        if not chosen:
            continue
        path = output_dir / f"cases_{mean['name']}.png"
        with atomic_path(path) as temporary:
            case_figure(chosen, label, mean["name"]).savefig(temporary, dpi=110, format="png")
        written.append(path)
    return written


def reliability_figure(calibration: dict[str, Any]) -> Figure:
    """Each foreground class's reliability diagram: per bin, the observed frequency of the class
    against the mean probability given it (the diagonal: calibrated), on one axis; and the voxels
    per bin, logarithmic, below it."""
    figure = Figure(figsize=(4.8, 5.6), layout="constrained")
    top, bottom = figure.subplots(2, 1, sharex=True, height_ratios=[3, 1])
    top.plot([0, 1], [0, 1], color="#888888", linewidth=0.8, linestyle="--")
    for entry in calibration["per_class"].values():
        bins = entry["reliability"]
        line = top.plot(bins["probability"], bins["frequency"], marker="o", markersize=3,
                        label=f"{entry['name']}: ECE {entry['ECE']:.4f}, Brier {entry['Brier']:.4f}")
        bottom.semilogy(bins["probability"], bins["voxels"], marker="o", markersize=3, color=line[0].get_color())
    top.set_ylabel("observed frequency")
    top.legend(fontsize=7, loc="upper left")
    top.set_title(f"reliability ({calibration['binning'].split(' of ')[0]}); foreground ECE "
                  f"{calibration['foreground']['ECE']:.4f}", fontsize=8)
    bottom.set_xlabel("mean probability in the bin")
    bottom.set_ylabel("voxels")
    return figure


def write_reliability_picture(summary: dict[str, Any], output_dir: Path) -> Path | None:
    """reliability.png beside the cases' pictures, where the summary has calibration; the file."""
    if "calibration" not in summary:
        return None
    path = output_dir / "reliability.png"
    with atomic_path(path) as temporary:
        reliability_figure(summary["calibration"]).savefig(temporary, dpi=110, format="png")
    return path
