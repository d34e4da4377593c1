"""Topology metrics per case and class, for thin and tubular structures, where Dice and the surface
metrics miss what matters: a vessel cut in two, a ring left open.

clDice (Shit et al., CVPR 2021): the harmonic mean of topology precision (the share of the
prediction's skeleton inside the reference) and topology sensitivity (the share of the reference's
skeleton inside the prediction), skeletons by scikit-image's skeletonize, in 2D and 3D. NaN when
the class is in neither map, 0 when it is in one only, as Dice.

Betti errors: |b_k(prediction) - b_k(reference)| for b0, the connected components, and b1, the
independent loops (holes in 2D, tunnels in 3D). The foreground is connected across corners (8 or
26 neighbours) and the background across faces (4 or 6), the dual pair for which these numbers are
well defined. b0 comes from scipy's labelling; in 2D b1 is the number of background components
that do not reach the image's border, and in 3D it follows from the Euler characteristic
(scikit-image's euler_number): chi = b0 - b1 + b2, with b2 the enclosed background components.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import ndimage
from skimage.measure import euler_number
from skimage.morphology import skeletonize

from segnet.errors import ConfigError

TOPOLOGY_METRICS = ("clDice", "Betti0 error", "Betti1 error")


def cldice(prediction: np.ndarray, reference: np.ndarray) -> float:
    """clDice of two binary masks (module docstring)."""
    prediction, reference = prediction.astype(bool), reference.astype(bool)
    if not prediction.any() and not reference.any():
        return math.nan
    if not prediction.any() or not reference.any():
        return 0.0
    skeleton_pred, skeleton_ref = skeletonize(prediction), skeletonize(reference)
    precision = (skeleton_pred & reference).sum() / max(skeleton_pred.sum(), 1)
    sensitivity = (skeleton_ref & prediction).sum() / max(skeleton_ref.sum(), 1)
    return float(2 * precision * sensitivity / (precision + sensitivity)) if precision + sensitivity else 0.0


def _enclosed_background(mask: np.ndarray) -> int:
    """Components of the background (face-connected) that do not reach the border."""
    padded = np.pad(~mask, 1, constant_values=True)  # one outer background around everything
    _, count = ndimage.label(padded, structure=ndimage.generate_binary_structure(mask.ndim, 1))
    return count - 1


def betti_numbers(mask: np.ndarray) -> tuple[int, int]:
    """(b0, b1) of a binary 2D or 3D mask (module docstring)."""
    mask = mask.astype(bool)
    if mask.ndim not in (2, 3):
        raise ValueError(f"Betti numbers of a {mask.ndim}D mask: give a 2D or 3D one")
    _, b0 = ndimage.label(mask, structure=ndimage.generate_binary_structure(mask.ndim, mask.ndim))
    if mask.ndim == 2:
        return b0, _enclosed_background(mask)
    chi = euler_number(np.pad(mask, 1), connectivity=3)
    return b0, b0 + _enclosed_background(mask) - int(chi)


def topology_scores(prediction: np.ndarray, reference: np.ndarray,
                    units: Sequence[Sequence[int]]) -> dict[str, list[float]]:
    """{metric: one value per foreground unit of `units` (the label values of a class or a region,
    segnet.data.regions)} of TOPOLOGY_METRICS between two label maps."""
    scores: dict[str, list[float]] = {metric: [] for metric in TOPOLOGY_METRICS}
    for values in units:
        pred, ref = np.isin(prediction, values), np.isin(reference, values)
        scores["clDice"].append(cldice(pred, ref))
        (p0, p1), (r0, r1) = betti_numbers(pred), betti_numbers(ref)
        scores["Betti0 error"].append(float(abs(p0 - r0)))
        scores["Betti1 error"].append(float(abs(p1 - r1)))
    return scores


def topology_classes(given: str | list[str] | None, class_names: list[str]) -> list[int]:
    """The class indices of topology_classes: none (null or []), "all" the foreground, or names."""
    if given in (None, "none"):
        return []
    if given == "all":
        return list(range(1, len(class_names)))
    names = [given] if isinstance(given, str) else list(given)
    unknown = [name for name in names if name not in class_names[1:]]
    if unknown:
        raise ConfigError(f"topology_classes names {unknown}, not classes of this model "
                          f"({', '.join(class_names[1:])}); give foreground class names, all, or none")
    return [class_names.index(name) for name in names]
