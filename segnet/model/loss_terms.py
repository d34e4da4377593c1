"""The training loss as a weighted sum of terms (conf/loss/, `loss.<term>.weight`):

- dice_ce: Dice plus cross-entropy (segnet.model.loss), deeply supervised where the model is;
- edge: the softmax's edges matched to the label's through the op (segnet.model.edge_loss);
- hausdorff_dt: MONAI's HausdorffDTLoss (Karimi and Salcudean, IEEE TMI 2020), from distance
  transforms of the prediction and the label;
- cldice: MONAI's SoftclDiceLoss (Shit et al., CVPR 2021), on soft skeletons, for thin and
  tubular classes.

A term of weight 0 is not built. Every term but dice_ce ramps in: its weight grows linearly from
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

from segnet.errors import ConfigError
from segnet.model.edge_loss import EdgeMatchingLoss
from segnet.model.loss import training_loss

TERMS = ("dice_ce", "edge", "hausdorff_dt", "cldice")
DEFAULT_LOSS = {"dice_ce": {"weight": 1.0}, "ramp_steps": 0}  # runs and checkpoints from before conf/loss/
MASKLESS = ("hausdorff_dt", "cldice")  # MONAI's losses take no mask: no ignore label


def build_term(name: str, settings: dict[str, Any], classes: int, ignore_label: int | None,
               backend: str) -> nn.Module:
    """One added term, called as term(logits, label, spacing)."""
    if name in MASKLESS and ignore_label is not None:
        raise ConfigError(f"loss.{name} cannot leave out the ignore label ({ignore_label}) of this dataset; "
                         f"set loss.{name}.weight=0 or use loss.edge, which can")
    if name == "edge":
        return EdgeMatchingLoss(classes, settings.get("band_mm", 2.0), backend, ignore_label)
    if name == "hausdorff_dt":
        return Unspaced(HausdorffDTLoss(include_background=False, to_onehot_y=True, softmax=True))
    return Unspaced(SoftclDiceLoss(iter_=int(settings.get("iterations", 3)), include_background=False,
                                   to_onehot_y=True, softmax=True))


class Unspaced(nn.Module):
    """A MONAI loss of (logits, label), called like the terms that take the spacing too."""

    def __init__(self, loss: nn.Module):
        super().__init__()
        self.loss = loss

    def forward(self, logits: torch.Tensor, label: torch.Tensor, spacing: Sequence[Sequence[float]]) -> torch.Tensor:
        return self.loss(logits.float(), label)


class TrainingLoss(nn.Module):
    def __init__(self, settings: dict[str, Any] | None, classes: int, ignore_label: int | None, levels: int,
                 backend: str = "auto"):
        super().__init__()
        settings = settings or DEFAULT_LOSS
        unknown = sorted(set(settings) - set(TERMS) - {"ramp_steps"})
        if unknown:
            raise ConfigError(f"loss: unknown term(s) {', '.join(unknown)}; the terms are {', '.join(TERMS)}")
        self.weights = {name: float(settings[name]["weight"]) for name in TERMS
                        if name in settings and float(settings[name]["weight"]) != 0}
        if not self.weights:
            raise ConfigError("loss: every term has weight 0; give one a weight, e.g. loss.dice_ce.weight=1")
        self.ramp_steps = int(settings.get("ramp_steps", 0))
        self.dice_ce = training_loss(ignore_label, levels) if "dice_ce" in self.weights else None
        self.added = nn.ModuleDict({name: build_term(name, settings[name], classes, ignore_label, backend)
                                    for name in self.weights if name != "dice_ce"})

    def ramp(self, step: int) -> float:
        """The added terms' share of their weight at `step`."""
        return 1.0 if self.ramp_steps <= 0 else min(1.0, step / self.ramp_steps)

    def forward(self, outputs: torch.Tensor | list[torch.Tensor], label: torch.Tensor, step: int,
                spacing: Sequence[Sequence[float]]) -> dict[str, torch.Tensor]:
        """{"loss": the weighted sum, and each term's value unweighted}; outputs is the network's
        logits, or its list of them with deep supervision (full resolution first)."""
        full = outputs[0] if isinstance(outputs, (list, tuple)) else outputs
        parts = {}
        if self.dice_ce is not None:
            parts["dice_ce"] = self.dice_ce(outputs, label)
        for name, term in self.added.items():
            parts[name] = term(full, label, spacing)
        total = sum(self.weights[name] * (1.0 if name == "dice_ce" else self.ramp(step)) * value
                    for name, value in parts.items())
        return {"loss": total, **parts}
