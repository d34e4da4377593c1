"""segnet-predict's uncertainty=true: how sure the prediction of each voxel and each case is.

An ensemble's members are every model (fold, configuration) and, with tta, every mirroring of
each. Two voxel maps, each divided by its largest value (log of the number of classes; for
region-based labels, the regions' binary entropies, averaged) so that both lie in [0, 1]:

- entropy: of the averaged probabilities (as written, after the temperature): high where the
  classes' probabilities are close, whether the members agree or not;
- mutual_information: the entropy of the members' mean less the mean of the members' entropies
  (on each configuration's grid, before the temperature): high only where the members disagree,
  which what they were not trained for tends to make them do.

Per case: the voxels uncertain for a foreground class are those whose probability of it lies in
[BAND, 1 - BAND]; their volume per class, and the score: the uncertain voxels over the voxels
either uncertain or labelled, summed over the foreground classes (0: every labelled voxel sure;
1: none), a higher score less certain. <case>_uncertainty.npz holds the maps, the score and the
volumes; uncertainty.csv lists every case's.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import nibabel as nib
import numpy as np
import torch

from segnet.data.formats import is_natural
from segnet.data.image_files import read_natural
from segnet.files import atomic_path

BAND = 0.1
TABLE = "uncertainty.csv"
EPSILON = 1e-12


def entropy(probabilities: torch.Tensor, regions: bool, dim: int = 0) -> torch.Tensor:
    """The entropy (nats) over the classes along `dim`, or the sum of each region's binary entropy."""
    def plogp(p: torch.Tensor) -> torch.Tensor:
        return p * p.clamp_min(EPSILON).log()

    if regions:
        return -(plogp(probabilities) + plogp(1 - probabilities)).sum(dim)
    return -plogp(probabilities).sum(dim)


def largest_entropy(channels: int, regions: bool) -> float:
    """The entropy of the most uncertain probabilities: uniform over the classes, or 1/2 per region."""
    return channels * math.log(2) if regions else math.log(channels)


def with_member_entropy(members: Iterable[torch.Tensor], regions: bool) -> torch.Tensor:
    """The members' mean probabilities (N, channels, *spatial) with one more channel after them:
    the mean of the members' entropies."""
    total, entropies, count = None, None, 0
    for p in members:
        h = entropy(p, regions, 1)[:, None]
        total, entropies = (p, h) if total is None else (total + p, entropies + h)
        count += 1
    return torch.cat([total, entropies], 1) / count


def disagreement(probabilities_and_member_entropy: torch.Tensor, regions: bool) -> torch.Tensor:
    """(*spatial) the mutual information of with_member_entropy's result (channels + 1, *spatial):
    the mean's entropy less the members' mean entropy, at least 0."""
    mean, member_entropy = probabilities_and_member_entropy[:-1], probabilities_and_member_entropy[-1]
    return (entropy(mean, regions) - member_entropy).clamp_min(0)


def voxel_spacing(image: str) -> np.ndarray:
    """The voxel spacing of an image file (mm; a natural image's as its reader gives it)."""
    if is_natural(image):
        return np.diag(read_natural(image)[1])[:3]
    return np.asarray(nib.load(image).header.get_zooms()[:3], np.float64)


def case_uncertainty(probabilities: np.ndarray, mutual_information: np.ndarray, label_map: np.ndarray,
                     units: Sequence[tuple[int, ...]], regions: bool, voxel_mm3: float) -> dict[str, np.ndarray]:
    """The case's maps (normalized), its score and each foreground unit's uncertain volume (mm3),
    from its probabilities, the members' mutual information (nats) and its label map on its grid."""
    first = probabilities.shape[0] - len(units)  # 1 with a background channel, 0 for regions
    largest = largest_entropy(probabilities.shape[0], regions)
    entropy_map = entropy(torch.from_numpy(probabilities), regions).numpy() / largest
    uncertain = np.stack([(p >= BAND) & (p <= 1 - BAND) for p in probabilities[first:]])
    labelled = np.stack([np.isin(label_map, values) for values in units])
    either = (uncertain | labelled).sum()
    score = uncertain.sum() / either if either else 0.0
    return {"entropy": entropy_map.astype(np.float32),
            "mutual_information": (mutual_information / largest).astype(np.float32),
            "score": np.float64(score), "uncertain_mm3": uncertain.reshape(len(units), -1).sum(1) * voxel_mm3}


def write_case(path: Path, uncertainty: dict[str, np.ndarray], names: Sequence[str]) -> None:
    with atomic_path(path) as temporary:
        np.savez_compressed(temporary, **uncertainty, class_names=np.array(list(names)))


def write_table(output: Path, files: dict[str, Path]) -> Path:
    """uncertainty.csv in `output`: each case's score and uncertain volumes, from its .npz ({case: file})."""
    rows, names = [], []
    for case, file in files.items():
        with np.load(file) as saved:
            names = [str(name) for name in saved["class_names"]]
            rows.append([case, float(saved["score"]), *saved["uncertain_mm3"].tolist()])
    path = output / TABLE
    with atomic_path(path) as temporary, open(temporary, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["case", "score", *(f"uncertain_mm3_{name}" for name in names)])
        writer.writerows(rows)
    return path
