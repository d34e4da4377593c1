"""What the loss terms besides dice_ce compare (segnet.model.loss_terms): the network's probability
of each foreground unit (segnet.data.regions: a class, or a region) and that unit's mask in the
label. A softmax over classes drops its background; the sigmoids of a region-based network are
its regions' probabilities already. The ignore label lies in no unit's mask; a term that can
leave it out reads where it lies.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from segnet.data.regions import Regions


@dataclass(frozen=True)
class ForegroundUnits:
    classes: int  # the network's classes, background included (with regions: the label's values)
    regions: Regions | None = None
    ignore_label: int | None = None

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """(N, units, *spatial) of logits (N, outputs, *spatial), in float32 at least (under autocast too)."""
        dtype = torch.promote_types(logits.dtype, torch.float32)
        if self.regions is not None:
            return torch.sigmoid(logits.to(dtype))
        return torch.softmax(logits, dim=1, dtype=dtype)[:, 1:]

    def masks(self, label: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """(N, units, *spatial) 0 or 1 of a label (N, 1, *spatial) holding label values (as floats too)."""
        if self.regions is not None:
            return self.regions.masks(label).to(dtype)
        values = label[:, 0].round().long()
        if self.ignore_label is not None:
            values = values.masked_fill(values == self.ignore_label, 0)
        return F.one_hot(values, self.classes).movedim(-1, 1)[:, 1:].to(dtype)

    def ignored(self, label: torch.Tensor) -> torch.Tensor | None:
        """(N, 1, *spatial) bool: where the label is the ignore label; None without one."""
        return None if self.ignore_label is None else label.round() == self.ignore_label
