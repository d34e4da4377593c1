"""Evaluation of a checkpoint on a dataset folder, shaped like nnU-Net's.

Each case is predicted by segnet.inference.prediction_writer (loaded as in training, predicted whole: slice by
slice for 2D models, Gaussian sliding window for 3D ones, optional flip TTA; mapped back to the
image's own geometry and written as a NIfTI with the image's affine), and scored against the
label file as stored, per class, with what nnU-Net's evaluator writes (Dice, IoU, TP, FP, FN, TN, n_pred, n_ref) plus
HD95 and the normalized surface Dice in mm, from the voxel spacing, and volumes
(segnet.metrics); for the classes named thin (topology_classes), clDice and the Betti errors
(segnet.topology_metrics), which the other classes' entries do not have.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from segnet.data.dataset_json import Case, DatasetDescription, image_stem
from segnet.data.headers import read_problem
from segnet.data.image_files import read_label
from segnet.data.regions import Regions, foreground_units
from segnet.data.splits import Split, choose_split, read_split
from segnet.errors import ConfigError, DatasetError
from segnet.evaluation.calibration import Calibration
from segnet.files import atomic_path, write_json
from segnet.inference.component_rules import NONE, Rules
from segnet.inference.ensemble import Predictor
from segnet.inference.names import check_same_names, dataset_names, run_names
from segnet.inference.pipeline import predicted_cases
from segnet.inference.prediction_writer import PredictionWriter
from segnet.inference.trained_model import TrainedModel
from segnet.metrics import NSD_TOLERANCE_MM, dice_per_class, drop_ignored, nanmean, overlap_counts, surface_scores
from segnet.progress import bar
from segnet.topology_metrics import TOPOLOGY_METRICS, topology_scores

SPLITS = ("validation", "test", "all")


def select_cases(
    description: DatasetDescription, split: str, data_hparams: dict[str, Any], splits_file: Path | None = None
) -> list[Case]:
    """The cases of a split; "validation" is the split the checkpoint was validated on: the one
    its run recorded in splits_file, else the one its data settings make."""
    if split not in SPLITS:
        raise ConfigError(f"data.split={split}; use one of {', '.join(SPLITS)}")
    if split == "test":
        if not description.test:
            raise ConfigError(f"{description.root} lists no test images (imagesTs); use data.split=validation or all")
        return list(description.test)
    if split == "all":
        return [*description.labelled, *description.test]
    return list(run_split(description, data_hparams, splits_file).val)


def run_split(description: DatasetDescription, data_hparams: dict[str, Any], splits_file: Path | None = None) -> Split:
    """The split a checkpoint's run trained and validated on: the one it recorded in splits_file,
    else the one its data settings make."""
    if splits_file is not None and splits_file.is_file():
        return read_split(splits_file, description)
    return choose_split(description, data_hparams.get("fold", 0), data_hparams.get("num_folds", 5),
                        data_hparams.get("split_seed", 12345))


def in_sample_cases(cases: Sequence[Case], split: Split) -> list[str]:
    """The names of the scored cases that the run trained on (a data.fold=all run's validation
    cases, or data.split=all's training cases)."""
    trained = {case.name for case in split.train}
    return [case.name for case in cases if case.name in trained]


def check_compatible(model: TrainedModel, description: DatasetDescription, checkpoint: Path) -> None:
    """The dataset names its channels and classes as the checkpoint's run did, in the same order,
    so that each score is reported under its own class's name."""
    check_same_names(run_names(model.settings, str(checkpoint)), dataset_names(description),
                     "score on a dataset whose dataset.json names the channels and labels as the model's run did, "
                     "its label maps numbered alike")


@dataclass
class CaseResult:
    case: Case
    prediction_file: Path
    metrics: dict[str, dict[str, Any]] | None
    unprocessed_metrics: dict[str, dict[str, Any]] | None = None  # before the rules, where there are rules
    calibration: Calibration | None = None  # its probabilities' against its label


# The per-class numbers every case gets, in summary.json and per_case.csv (and averaged).
METRICS = ("Dice", "IoU", "HD95", "NSD", "TP", "FP", "FN", "TN", "n_pred", "n_ref", "volume_pred_mm3", "volume_ref_mm3")


def reported_metrics(results_metrics: list[dict[str, dict[str, Any]]]) -> tuple[str, ...]:
    """METRICS, and the topology metrics where any case scored them (topology_classes)."""
    scored = any(k in m for case in results_metrics for m in case.values() for k in TOPOLOGY_METRICS)
    return METRICS + (TOPOLOGY_METRICS if scored else ())


def read_reference(label_file: str, shape: tuple[int, ...]) -> tuple[np.ndarray, list[float]]:
    """A case's label map (int64) and its voxel spacing, checked to lie on its image's grid."""
    try:
        reference, spacing = read_label(label_file)
    except Exception as error:  # a gzip stream that ends early, a corrupt one
        raise DatasetError(read_problem(label_file, error)) from None
    if reference.shape != tuple(shape):
        raise ConfigError(f"{label_file} has shape {reference.shape} but its image {tuple(shape)}")
    return reference, spacing


def score_case(
    prediction: np.ndarray, label_file: str, class_names: list[str], nsd_tolerance_mm: float = NSD_TOLERANCE_MM,
    ignore_label: int | None = None, topology: list[int] = (), regions: Regions | None = None,
) -> dict[str, dict[str, Any]]:
    """Every METRICS number of each foreground class (each region, for region-based labels: its
    values in both label maps), and the topology metrics of the classes in `topology`."""
    reference, spacing = read_reference(label_file, prediction.shape)
    prediction, reference, scored = drop_ignored(prediction.astype(np.int64), reference, ignore_label)
    voxel_mm3 = float(np.prod(spacing))
    units = foreground_units(len(class_names), regions)
    pred_t, ref_t = torch.from_numpy(prediction.astype(np.int64)), torch.from_numpy(reference)
    dice = dice_per_class(pred_t, ref_t, units)
    hd95, nsd = surface_scores(pred_t, ref_t, units, spacing, nsd_tolerance_mm)
    shapes = topology_scores(prediction, reference, [units[c - 1] for c in topology])
    metrics = {}
    for c in range(1, len(class_names)):
        counts = overlap_counts(prediction, reference, units[c - 1], scored)
        metrics[str(c)] = {
            "name": class_names[c], "Dice": dice[c - 1], "HD95": hd95[c - 1], "NSD": nsd[c - 1], **counts,
            "volume_pred_mm3": counts["n_pred"] * voxel_mm3, "volume_ref_mm3": counts["n_ref"] * voxel_mm3,
            **({k: shapes[k][list(topology).index(c)] for k in TOPOLOGY_METRICS} if c in topology else {}),
        }
    return metrics


class Evaluator(PredictionWriter):
    """Predictions (predictions/<case> in output_dir, in the images' format) scored against each case's
    label."""

    def __init__(self, model: TrainedModel | list[TrainedModel], output_dir: Path, tta: bool = False,
                 nsd_tolerance_mm: float = NSD_TOLERANCE_MM, rules: Rules = NONE, topology: list[int] = (),
                 previous: dict[str, Path] | None = None, temperature: float | dict[str, float] = 1.0):
        super().__init__(Predictor(model if isinstance(model, list) else [model], tta, temperature=temperature),
                         output_dir / "predictions", rules=rules, previous=previous)
        self.class_names = self.predictor.class_names
        self.nsd_tolerance_mm = nsd_tolerance_mm
        self.topology = list(topology)

    def finish(self, case: Case, loaded: list[dict], probabilities: list[torch.Tensor]) -> CaseResult:
        restored = self.restored_probabilities(loaded, probabilities)
        prediction = self.write(case, restored)
        if not case.label:
            return CaseResult(case, prediction.file, None)
        unprocessed = self.score(prediction.unprocessed, case) if self.rules != NONE else None
        return CaseResult(case, prediction.file, self.score(prediction.label_map, case), unprocessed,
                          self.calibration(restored[:self.channels], case))

    def calibration(self, probabilities: np.ndarray, case: Case) -> Calibration:
        """The calibration sums of the case's probabilities against its label (before the rules)."""
        reference, _ = read_reference(case.label, probabilities.shape[1:])
        units = foreground_units(len(self.class_names), self.predictor.regions)
        return Calibration.of(probabilities, reference, units, self.predictor.ignore_label)

    def score(self, label_map: np.ndarray, case: Case) -> dict[str, dict[str, Any]]:
        return score_case(label_map, case.label, self.class_names, self.nsd_tolerance_mm, self.predictor.ignore_label,
                          self.topology, self.predictor.regions)

    def run(self, cases: list[Case], workers: int = 0) -> list[CaseResult]:
        """Every case predicted and scored, in order; `workers` loader processes read ahead."""
        return list(bar(predicted_cases(self, cases, workers), "evaluating", "case", total=len(cases)))


def means(scored: list[dict[str, dict[str, Any]]], class_names: list[str]) -> tuple[dict, dict]:
    """The mean of each class's metrics over cases and the foreground mean over classes (NaN left
    out, as nnU-Net's summary.json does)."""
    names = reported_metrics(scored)
    mean = {
        str(c): {"name": class_names[c], **{k: nanmean([m[str(c)].get(k, math.nan) for m in scored]) for k in names}}
        for c in range(1, len(class_names))
    }
    return mean, {k: nanmean([m[k] for m in mean.values()]) for k in names}


def summarize(results: list[CaseResult], class_names: list[str]) -> dict[str, Any]:
    """nnU-Net-style summary: metric_per_case, mean per class, foreground_mean (NaN left out); the
    probabilities' calibration over the scored cases (segnet.evaluation.calibration); and where
    postprocessing rules were applied, the same means without them."""
    scored = [r for r in results if r.metrics is not None]
    per_case = [
        {
            "image": list(r.case.images) if len(r.case.images) > 1 else r.case.images[0],
            "reference_file": r.case.label,
            "prediction_file": str(r.prediction_file),
            "metrics": r.metrics,
        }
        for r in results
    ]
    mean, foreground = means([r.metrics for r in scored], class_names)
    summary = {"metric_per_case": per_case, "mean": mean, "foreground_mean": foreground, "num_cases": len(results),
               "num_scored": len(scored)}
    calibrated = [r.calibration for r in scored if r.calibration is not None]
    if calibrated:
        summary["calibration"] = sum(calibrated[1:], calibrated[0]).report(class_names[1:])
    if any(r.unprocessed_metrics is not None for r in scored):
        mean, foreground = means([r.unprocessed_metrics for r in scored], class_names)
        summary["without_postprocessing"] = {"mean": mean, "foreground_mean": foreground}
    return summary


def write_reports(summary: dict[str, Any], output_dir: Path) -> None:
    # NaN is written as NaN, as nnU-Net's summary.json does (Python's json reads it back).
    write_json(output_dir / "summary.json", summary)
    with atomic_path(output_dir / "per_case.csv") as temporary, open(temporary, "w", newline="") as f:
        writer = csv.writer(f)
        names = reported_metrics([case["metrics"] or {} for case in summary["metric_per_case"]])
        writer.writerow(["case", "class", "name", *names])
        for case in summary["metric_per_case"]:
            for c, m in (case["metrics"] or {}).items():
                name = image_stem(case["prediction_file"])
                writer.writerow([name, c, m["name"], *(m.get(k, math.nan) for k in names)])
