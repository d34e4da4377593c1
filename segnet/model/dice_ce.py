"""The training loss's dice_ce term (segnet.model.loss_terms): Dice plus cross-entropy, as nnU-Net
and MONAI's DiceCELoss compute it.

With an ignore label (dataset.json's "ignore"), both terms see only the voxels whose class is
known: the Dice term through MONAI's MaskedDiceLoss, cross-entropy through its ignore_index.

With region-based labels (segnet.data.regions), nnU-Net's region loss: a sigmoid per region,
Dice plus binary cross-entropy against each region's mask (the ignore label's voxels out of both).

Deep supervision (model.deep_supervision) takes the same loss at every resolution the network
returns, through MONAI's DeepSupervisionLoss: the label downsampled to each by nearest-exact
interpolation, the weights nnU-Net's (halving per level, summing to one).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from monai.losses import DeepSupervisionLoss, DiceCELoss, MaskedDiceLoss
from torch import nn

from segnet.data.regions import Regions


class SegmentationLoss(nn.Module):
    def __init__(self, ignore_label: int | None = None):
        super().__init__()
        self.ignore_label = ignore_label
        self.dice_ce = DiceCELoss(to_onehot_y=True, softmax=True)
        self.masked_dice = MaskedDiceLoss(to_onehot_y=True, softmax=True)

    def forward(self, logits: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        """logits (N, classes, *spatial), label (N, 1, *spatial) integer."""
        if self.ignore_label is None:
            return self.dice_ce(logits, label)
        known = label != self.ignore_label
        if not known.any():  # a crop of ignored voxels only teaches nothing
            return logits.sum() * 0.0
        dice = self.masked_dice(logits, label * known, mask=known)
        cross_entropy = F.cross_entropy(logits, label[:, 0].long(), ignore_index=self.ignore_label)
        return dice + cross_entropy


class RegionLoss(nn.Module):
    def __init__(self, regions: Regions, ignore_label: int | None = None):
        super().__init__()
        self.regions = regions
        self.ignore_label = ignore_label
        self.dice = MaskedDiceLoss(sigmoid=True)

    def forward(self, logits: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        """logits (N, regions, *spatial), label (N, 1, *spatial) holding label values."""
        target = self.regions.masks(label)
        known = torch.ones_like(label, dtype=logits.dtype) if self.ignore_label is None else \
            (label.round() != self.ignore_label).to(logits.dtype)
        if not known.any():  # a crop of ignored voxels only teaches nothing
            return logits.sum() * 0.0
        bce = F.binary_cross_entropy_with_logits(logits.float(), target, weight=known.expand_as(target),
                                                 reduction="sum") / (known.sum() * target.shape[1])
        return self.dice(logits, target, mask=known) + bce


def supervision_weights(levels: int) -> list[float]:
    """The weights of `levels` outputs, full resolution first: halving per level, summing to one."""
    halves = [0.5**level for level in range(levels)]
    return [weight / sum(halves) for weight in halves]


def dice_ce_loss(ignore_label: int | None, levels: int = 1, regions: Regions | None = None) -> nn.Module:
    """The loss of a network with `levels` outputs (1: no deep supervision). Labels come as
    floats holding the class numbers: nearest interpolation has no integer kernels."""
    loss = SegmentationLoss(ignore_label) if regions is None else RegionLoss(regions, ignore_label)
    return loss if levels == 1 else DeepSupervisionLoss(loss, weights=supervision_weights(levels))
