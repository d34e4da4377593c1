"""A trained network as prediction, evaluation and export need it, whatever it came from (a
training checkpoint or an exported package): the network, the data settings it was trained
with (classes, channels, the plan's geometry), its whole-image settings, the device it runs on
and the autocast it was trained under."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch

from segnet.checkpoints.settings import RunSettings
from segnet.inference.windows import Network, predict_whole_image


@dataclass(frozen=True)
class TrainedModel:
    net: Network  # (N, C, *spatial) -> logits (N, classes, *spatial)
    data: dict[str, Any]  # the training run's data section (its split; its settings, read through `settings`)
    inference: dict[str, Any]  # roi_size, sw_batch_size, overlap
    device: torch.device
    precision: str = "32-true"  # the trainer's; inference runs under the same autocast
    backend: str = "auto"  # the edge op's backend in net
    step: int | None = None  # the optimizer step the weights were saved at (a checkpoint's)

    def __post_init__(self) -> None:
        if isinstance(self.net, torch.nn.Module):
            self.net.eval()  # normalization and dropout as inference needs them, whoever built it

    @functools.cached_property
    def settings(self) -> RunSettings:
        """The training run's settings: its configuration, geometry, classes and channels."""
        return RunSettings.from_data(self.data)

    def predict_logits(self, image: torch.Tensor, output_device: torch.device | None = None) -> torch.Tensor:
        """Whole-image logits for a batch (N, C, *spatial) on self.device, accumulated on
        `output_device` (None: self.device)."""
        return predict_whole_image(self.net, image, self.settings.spatial_dims, self.inference, output_device)
