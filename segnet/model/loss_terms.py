"""The training loss as a weighted sum of terms (conf/loss/, `loss.<term>.weight`):

- dice_ce: Dice plus cross-entropy (segnet.model.dice_ce), deeply supervised where the model is;
- edge: the prediction's edges matched to the label's through the op (segnet.model.edge_loss);
- hausdorff_dt: MONAI's HausdorffDTLoss (Karimi and Salcudean, IEEE TMI 2020), from distance
  transforms of the prediction and the label;
- cldice: MONAI's SoftclDiceLoss (Shit et al., CVPR 2021), on soft skeletons, for thin and
  tubular classes;
- boundary: Kervadec et al.'s boundary loss on signed distance maps, and skeleton_recall:
  Kirchhoff et al.'s Skeleton Recall on tubed skeletons (segnet.model.map_losses), both maps made
  once per case into the preprocessed cache (segnet.preprocessing.maps): data=folder only.

The terms besides dice_ce score each foreground unit (segnet.model.foreground): the softmax's
classes but the background, or, with region-based labels, each region's sigmoid against the
region's mask. A term of weight 0 is not built. Every term but dice_ce ramps in: its weight grows linearly from
0 over the first loss.ramp_steps steps, because a boundary term on an untrained network's diffuse
softmax only adds noise (Kervadec et al. raise their boundary term's weight during training
too). The added terms score the full-resolution output; deep supervision stays dice_ce's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from monai.losses import HausdorffDTLoss, SoftclDiceLoss
from torch import nn

from segnet.data.regions import Regions
from segnet.errors import ConfigError
from segnet.model.dice_ce import dice_ce_loss
from segnet.model.edge_loss import EdgeMatchingLoss
from segnet.model.foreground import ForegroundUnits
from segnet.model.map_losses import BoundaryLoss, SkeletonRecallLoss

TERMS = ("dice_ce", "edge", "hausdorff_dt", "cldice", "boundary", "skeleton_recall")
# What a term takes besides the logits and the label: the batch's spacing, or a map of the label's
TERM_INPUT = {"edge": "spacing", "boundary": "distance", "skeleton_recall": "skeleton"}
MASKLESS = ("hausdorff_dt", "cldice")  # MONAI's losses take no mask: no ignore label


def effective_loss(settings: dict[str, Any]) -> dict[str, Any]:
    """What a loss config computes: its terms of nonzero weight, and the ramp where a term ramps.
    Two configs train alike exactly when these agree."""
    active = {name: value for name, value in settings.items() if name in TERMS and float(value["weight"]) != 0}
    ramp = {"ramp_steps": settings.get("ramp_steps", 0)} if set(active) - {"dice_ce"} else {}
    return {**active, **ramp}


def required_maps(settings: dict[str, Any]) -> list[str]:
    """The label's derived maps that the loss's terms read (for the data module to carry)."""
    return [TERM_INPUT[name] for name in ("boundary", "skeleton_recall")
            if float(settings.get(name, {}).get("weight", 0)) != 0]


class OnUnits(nn.Module):
    """A MONAI loss of probabilities and one-hot targets, given the foreground units' (every channel
    is a foreground unit, so MONAI's include_background keeps them all)."""

    def __init__(self, loss: nn.Module, units: ForegroundUnits):
        super().__init__()
        self.loss = loss
        self.units = units

    def forward(self, logits: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        probabilities = self.units.probabilities(logits)
        return self.loss(probabilities, self.units.masks(label, probabilities.dtype))


def build_term(name: str, settings: dict[str, Any], units: ForegroundUnits, backend: str) -> nn.Module:
    """One added term, called as term(logits, label) or, with a TERM_INPUT, term(logits, label, input)."""
    if name in MASKLESS and units.ignore_label is not None:
        raise ConfigError(f"loss.{name} cannot leave out the ignore label ({units.ignore_label}) of this dataset; "
                         f"set loss.{name}.weight=0 or use loss.edge, which can")
    if name == "edge":
        return EdgeMatchingLoss(units, settings.get("band_mm", 2.0), backend)
    if name == "boundary":
        return BoundaryLoss(units)
    if name == "skeleton_recall":
        return SkeletonRecallLoss(units)
    if name == "hausdorff_dt":
        return OnUnits(HausdorffDTLoss(include_background=True), units)
    return OnUnits(SoftclDiceLoss(iter_=int(settings.get("iterations", 3)), include_background=True), units)


class TrainingLoss(nn.Module):
    def __init__(self, settings: dict[str, Any], classes: int, ignore_label: int | None, levels: int,
                 backend: str = "auto", regions: Regions | None = None):
        super().__init__()
        unknown = sorted(set(settings) - set(TERMS) - {"ramp_steps"})
        if unknown:
            raise ConfigError(f"loss: unknown term(s) {', '.join(unknown)}; the terms are {', '.join(TERMS)}")
        self.weights = {name: float(value["weight"]) for name, value in effective_loss(settings).items()
                        if name in TERMS}
        if not self.weights:
            raise ConfigError("loss: every term has weight 0; give one a weight, e.g. loss.dice_ce.weight=1")
        self.ramp_steps = int(settings.get("ramp_steps", 0))
        self.dice_ce = dice_ce_loss(ignore_label, levels, regions) if "dice_ce" in self.weights else None
        units = ForegroundUnits(classes, regions, ignore_label)
        self.added = nn.ModuleDict({name: build_term(name, settings[name], units, backend)
                                    for name in self.weights if name != "dice_ce"})

    def ramp(self, step: int) -> float:
        """The added terms' share of their weight at `step`."""
        return 1.0 if self.ramp_steps <= 0 else min(1.0, step / self.ramp_steps)

    def forward(self, outputs: torch.Tensor | list[torch.Tensor], label: torch.Tensor, step: int,
                spacing: Sequence[Sequence[float]],
                maps: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """{"loss": the weighted sum, and each term's value unweighted}; outputs is the network's
        logits, or its list of them with deep supervision (full resolution first); spacing one per
        case, maps the label's derived maps that the batch carries."""
        full = outputs[0] if isinstance(outputs, (list, tuple)) else outputs
        inputs = {"spacing": spacing, **(maps or {})}
        parts = {}
        if self.dice_ce is not None:
            parts["dice_ce"] = self.dice_ce(outputs, label)
        for name, term in self.added.items():
            needs = TERM_INPUT.get(name)
            if needs is None:
                parts[name] = term(full, label)
            elif needs in inputs:
                parts[name] = term(full, label, inputs[needs])
            else:
                raise ConfigError(f"loss.{name} needs the label's {needs} maps, which the preprocessed cache's "
                                  "crops carry: train on data=folder with data.preprocessed=true")
        total = sum(self.weights[name] * (1.0 if name == "dice_ce" else self.ramp(step)) * value
                    for name, value in parts.items())
        return {"loss": total, **parts}
