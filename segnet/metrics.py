"""Per-case, per-class segmentation metrics, shared by validation and evaluation.

Each metric scores foreground units (segnet.data.regions.foreground_units): the label values a
scored structure covers, one class each, or a region's values, so that regions are scored on the
label maps their predictions are written as, as nnU-Net scores them.

Dice is MONAI's (2 TP / (2 TP + FP + FN) from label maps) with nnU-Net's convention for empty
classes: NaN when a class is absent from both the prediction and the reference (left out of
every mean), 0 when it is in only one.
HD95 is MONAI's 95th-percentile Hausdorff distance in physical units (voxel spacing): NaN when a
class is in neither side; when it is on one side only (missed entirely, or predicted where there
is none), the penalty given by the caller, in evaluation the image's diagonal in mm (no two
voxels of the image are farther apart), so that missing a structure never improves mean HD95.
NSD is MONAI's normalized surface Dice at a tolerance in mm: the share of both boundaries within
the tolerance of the other (NaN in neither, 0 on one side only).
The boundary metrics of a case come from surface_scores, the one place evaluation and validation
take them from (the same penalty and NSD tolerance in both).
Voxels of the ignore label are background on both sides for every metric, and not counted as TN.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
from monai.metrics import compute_dice, compute_hausdorff_distance, compute_surface_dice

NSD_TOLERANCE_MM = 1.0  # the normalized surface Dice's boundary tolerance, in evaluation and validation


def unit_mask(label: torch.Tensor | np.ndarray, values: Sequence[int]) -> torch.Tensor | np.ndarray:
    """Where an integer label map holds any of a foreground unit's `values`."""
    if isinstance(label, torch.Tensor):
        return torch.isin(label, torch.tensor(list(values), device=label.device))
    return np.isin(label, list(values))


def dice_per_class(prediction: torch.Tensor, reference: torch.Tensor, units: Sequence[Sequence[int]]) -> list[float]:
    """Dice of each foreground unit between two integer label maps of the same shape."""
    pred, ref = unit_masks(prediction.reshape(-1), units), unit_masks(reference.reshape(-1), units)
    # ignore_empty=False scores "empty in both" as 1; nnU-Net leaves such a class out instead.
    scores = compute_dice(pred.float(), ref.float(), include_background=True, ignore_empty=False)[0]
    return [math.nan if not (pred[0, u].any() or ref[0, u].any()) else float(score)
            for u, score in enumerate(scores.tolist())]


def unit_masks(label: torch.Tensor, units: Sequence[Sequence[int]]) -> torch.Tensor:
    """(1, units, *spatial) bool: each unit's voxels in an integer label map (*spatial)."""
    return torch.stack([unit_mask(label, values) for values in units])[None]


def per_present_unit(
    prediction: torch.Tensor, reference: torch.Tensor, units: Sequence[Sequence[int]],
    score: Callable[[torch.Tensor, torch.Tensor], float], one_sided: float,
) -> list[float]:
    """score(prediction mask, reference mask), each (1, 1, *spatial), of each foreground unit that
    both spatial label maps hold; `one_sided` where only one holds it, NaN where neither does
    (MONAI's surface distances would warn of an empty mask and return inf or NaN)."""
    scores = []
    for values in units:
        pred_c = unit_mask(prediction, values)[None, None]
        ref_c = unit_mask(reference, values)[None, None]
        if not pred_c.any() or not ref_c.any():
            scores.append(one_sided if (pred_c.any() or ref_c.any()) else math.nan)
        else:
            scores.append(score(pred_c, ref_c))
    return scores


def hd95_per_class(
    prediction: torch.Tensor, reference: torch.Tensor, units: Sequence[Sequence[int]],
    spacing: Sequence[float] | None = None, one_sided: float = math.nan,
) -> list[float]:
    """95th-percentile Hausdorff distance of each foreground unit (spatial label maps); `one_sided`
    where a unit is in only one of them."""
    spacing = list(spacing) if spacing else None
    return per_present_unit(prediction, reference, units, lambda pred_c, ref_c: float(compute_hausdorff_distance(
        pred_c, ref_c, include_background=True, percentile=95, spacing=spacing).item()), one_sided)


def nsd_per_class(
    prediction: torch.Tensor, reference: torch.Tensor, units: Sequence[Sequence[int]], tolerance_mm: float,
    spacing: Sequence[float] | None = None,
) -> list[float]:
    """Normalized surface Dice of each foreground unit (spatial label maps) at tolerance_mm; 0
    where a unit is in only one of them."""
    spacing = list(spacing) if spacing else None
    return per_present_unit(prediction, reference, units, lambda pred_c, ref_c: float(compute_surface_dice(
        pred_c, ref_c, class_thresholds=[tolerance_mm], include_background=True, spacing=spacing).item()), 0.0)


def surface_scores(
    prediction: torch.Tensor, reference: torch.Tensor, units: Sequence[Sequence[int]], spacing: Sequence[float],
    nsd_tolerance_mm: float = NSD_TOLERANCE_MM,
) -> tuple[list[float], list[float]]:
    """(HD95, NSD) of each foreground unit between two spatial label maps on a grid of this
    spacing (mm), as evaluation reports them: a unit on one side only gets the image's diagonal as
    its HD95 (diagonal_mm) and 0 NSD."""
    spacing = [float(s) for s in spacing]
    hd95 = hd95_per_class(prediction, reference, units, spacing, one_sided=diagonal_mm(reference.shape, spacing))
    return hd95, nsd_per_class(prediction, reference, units, nsd_tolerance_mm, spacing)


def drop_ignored(prediction, reference, ignore_label: int | None):
    """Both label maps with the reference's ignored voxels set to background in each, so that no
    class is scored there (nnU-Net's ignore label), and how many voxels are scored."""
    if ignore_label is None:
        return prediction, reference, reference.size if isinstance(reference, np.ndarray) else reference.numel()
    known = reference != ignore_label
    return prediction * known, reference * known, int(known.sum())


def overlap_counts(
    prediction: np.ndarray, reference: np.ndarray, values: Sequence[int], scored: int | None = None
) -> dict[str, float]:
    """nnU-Net's counts for the unit of these label values, and IoU (NaN when the unit is in
    neither); TN over the `scored` voxels (all by default; those not ignored)."""
    pred, ref = unit_mask(prediction, values), unit_mask(reference, values)
    tp, fp, fn = int((pred & ref).sum()), int((pred & ~ref).sum()), int((~pred & ref).sum())
    tn = int((pred.size if scored is None else scored) - tp - fp - fn)
    return {"IoU": tp / (tp + fp + fn) if tp + fp + fn else math.nan, "TP": tp, "FP": fp, "FN": fn, "TN": tn,
            "n_pred": tp + fp, "n_ref": tp + fn}


def diagonal_mm(shape: Sequence[int], spacing: Sequence[float]) -> float:
    """The largest distance between two voxels of an image: its HD95 penalty."""
    return float(np.sqrt(sum(((n - 1) * s) ** 2 for n, s in zip(shape, spacing, strict=True))))


def nanmean(values: Sequence[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return float(np.mean(finite)) if finite else math.nan


def mean_per_class(per_case: Sequence[Sequence[float]]) -> list[float]:
    """Per-class mean over cases, NaN cases left out."""
    if not per_case:
        return []
    return [nanmean([case[c] for case in per_case]) for c in range(len(per_case[0]))]
