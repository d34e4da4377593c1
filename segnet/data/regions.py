"""Region-based labels, as nnU-Net v2 reads them from dataset.json: a region is a set of label
values ("whole_tumor": [1, 2, 3], "tumor_core": [2, 3], "enhancing_tumor": 3), regions may
overlap, and the network predicts one sigmoid channel per region instead of a softmax over classes.

Everything that scores, samples or converts works on *foreground units*, the label values each
scored structure covers: a class c is the unit (c,), a region its values. A prediction goes back
to a label map through "regions_class_order": the regions are painted in that order, each with its
value where its probability exceeds one half, so that a nested region (the enhancing tumour
inside the core inside the whole tumour) paints over the one around it.

A run's regions travel in its data settings (data.regions: the values of each region and the
class order; the names are data.class_names after the background), so a checkpoint alone
predicts and scores them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # imported where used: dataset.json is read by commands that never load torch
    import torch

THRESHOLD = 0.5  # a voxel is in a region where its sigmoid exceeds this, as nnU-Net converts


@dataclass(frozen=True)
class Regions:
    values: tuple[tuple[int, ...], ...]  # the label values of each region, in the network's channel order
    class_order: tuple[int, ...]  # the label value each region paints, one per region, in the same order

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any] | None) -> Regions | None:
        """The regions of a run's data.regions; None for a run that trains classes."""
        if not settings:
            return None
        return cls(tuple(tuple(int(v) for v in region) for region in settings["values"]),
                   tuple(int(v) for v in settings["class_order"]))

    def settings(self) -> dict[str, list]:
        return {"values": [list(region) for region in self.values], "class_order": list(self.class_order)}

    def masks(self, label: torch.Tensor) -> torch.Tensor:
        """(N, regions, *spatial) float: which voxels of an integer label map (N, 1, *spatial), or of
        one holding integers as floats, each region covers."""
        import torch

        label = label.round().long() if label.is_floating_point() else label
        return torch.cat([torch.isin(label, torch.tensor(region, device=label.device)) for region in self.values],
                         dim=1).float()

    def label_map(self, probabilities: torch.Tensor | np.ndarray) -> torch.Tensor | np.ndarray:
        """The label map (*spatial) of region probabilities (regions, *spatial): each region painted
        with its class_order value where its probability exceeds THRESHOLD, in that order."""
        if isinstance(probabilities, np.ndarray):
            out = np.zeros(probabilities.shape[1:], np.int64)
        else:
            import torch

            out = probabilities.new_zeros(probabilities.shape[1:], dtype=torch.long)
        for region, value in enumerate(self.class_order):
            out[probabilities[region] > THRESHOLD] = value
        return out


def output_names(class_names: Sequence[str], regions: Regions | None) -> list[str]:
    """What each of the network's output channels is: a class, or a region (no background)."""
    return list(class_names[1:] if regions is not None else class_names)


def foreground_units(num_classes: int, regions: Regions | None) -> list[tuple[int, ...]]:
    """The label values of each scored structure: the regions', else one class each (1..K-1)."""
    return list(regions.values) if regions is not None else [(c,) for c in range(1, num_classes)]
