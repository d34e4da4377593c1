"""What a dataset item holds: image (C, *spatial) float, label (1, *spatial) int, a name."""

from __future__ import annotations

from typing import TypedDict

import torch


class Sample(TypedDict):
    image: torch.Tensor
    label: torch.Tensor
    name: str
