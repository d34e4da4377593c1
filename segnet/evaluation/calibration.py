"""How far a model's probabilities can be taken at their word: segnet-evaluate's calibration.

Each foreground class (each region, for region-based labels) is scored one against the rest: its
probability p at every scored voxel against whether the reference has that class there (y).

- ECE, the expected calibration error: the voxels put into BINS equal-width bins of p
  ([0, 1/BINS), ..., [1 - 1/BINS, 1]); the voxel-weighted mean over bins of |mean y - mean p|.
  The foreground's pools the foreground classes' bins (every voxel once per class).
- Brier score: the mean of (p - y)^2; the foreground's is the mean over the foreground classes.

Both are 0 for probabilities that are right and sure, and summed over every case before dividing
(a large case weighs more). The bins' mean p and mean y are the reliability diagram's points.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

BINS = 15
BINNING = f"{BINS} equal-width bins of each class's probability (one class against the rest), voxels of every case"


@dataclass
class Calibration:
    """The sums that ECE and the Brier score are made of, per foreground unit, over the voxels seen."""
    voxels: np.ndarray  # (units, BINS) voxels in each bin
    confidence: np.ndarray  # (units, BINS) their probabilities summed
    hits: np.ndarray  # (units, BINS) how many of them the reference has in the unit
    squared_error: np.ndarray  # (units,) (p - y)^2 summed over every voxel

    @classmethod
    def of(cls, probabilities: np.ndarray, reference: np.ndarray, units: Sequence[tuple[int, ...]],
           ignore_label: int | None = None) -> Calibration:
        """The sums of one case: probabilities (channels, *spatial), softmax (a background channel
        first) or one per region; reference (*spatial) the label values; units the label values of
        each foreground unit (segnet.data.regions.foreground_units)."""
        first = probabilities.shape[0] - len(units)  # 1 with a background channel, 0 for regions
        scored = np.ones(reference.shape, bool) if ignore_label is None else reference != ignore_label
        voxels, confidence, hits, squared = [], [], [], []
        for i, values in enumerate(units):
            p = probabilities[first + i][scored].astype(np.float64)
            y = np.isin(reference[scored], values).astype(np.float64)
            bins = np.minimum((p * BINS).astype(np.int64), BINS - 1)
            voxels.append(np.bincount(bins, minlength=BINS))
            confidence.append(np.bincount(bins, p, minlength=BINS))
            hits.append(np.bincount(bins, y, minlength=BINS))
            squared.append(float(((p - y) ** 2).sum()))
        return cls(np.array(voxels, np.float64), np.array(confidence), np.array(hits), np.array(squared))

    def __add__(self, other: Calibration) -> Calibration:
        return Calibration(self.voxels + other.voxels, self.confidence + other.confidence, self.hits + other.hits,
                           self.squared_error + other.squared_error)

    def ece(self) -> np.ndarray:
        """(units,) each unit's ECE."""
        return np.abs(self.hits - self.confidence).sum(1) / self.voxels.sum(1)

    def foreground_ece(self) -> float:
        """The ECE of the foreground units' bins pooled."""
        return float(np.abs(self.hits.sum(0) - self.confidence.sum(0)).sum() / self.voxels.sum())

    def brier(self) -> np.ndarray:
        """(units,) each unit's Brier score."""
        return self.squared_error / self.voxels.sum(1)

    def reliability(self, unit: int) -> dict[str, list[float]]:
        """A unit's reliability diagram: each non-empty bin's mean probability, observed frequency
        and voxel count."""
        kept = self.voxels[unit] > 0
        n = self.voxels[unit][kept]
        return {"probability": (self.confidence[unit][kept] / n).tolist(),
                "frequency": (self.hits[unit][kept] / n).tolist(), "voxels": n.astype(int).tolist()}

    def report(self, names: Sequence[str]) -> dict[str, Any]:
        """summary.json's `calibration`: per foreground unit (keyed as `mean` is, "1", "2", ...) and
        over the foreground, the ECE and the Brier score, and each unit's reliability bins."""
        ece, brier = self.ece(), self.brier()
        return {"binning": BINNING,
                "per_class": {str(i + 1): {"name": name, "ECE": float(ece[i]), "Brier": float(brier[i]),
                                           "reliability": self.reliability(i)} for i, name in enumerate(names)},
                "foreground": {"ECE": self.foreground_ece(), "Brier": float(brier.mean())}}
