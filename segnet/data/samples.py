"""What a dataset item holds: image (C, *spatial) float, label (1, *spatial) int, a name; a
training crop of the preprocessed cache also its spacing and the label's derived maps that the
loss asks for (segnet.preprocessing.maps), and a cascade's item the first stage's one-hot label
map (segnet.data.cascade_input), which augmentation moves with the label by the same grid, each
by its own interpolation."""

from __future__ import annotations

from typing import TypedDict

import torch


class Sample(TypedDict):
    image: torch.Tensor
    label: torch.Tensor
    name: str


# How augmentation resamples each derived map: distances vary smoothly, skeleton voxels are class numbers.
MAP_INTERPOLATION = {"distance": "bilinear", "skeleton": "nearest"}
PREVIOUS = "previous"  # a cascade's first-stage channels (segnet.data.cascade_input)
# What moves with the label: its derived maps, and a cascade's first stage by nearest neighbour.
MOVED_WITH_LABEL = {**MAP_INTERPOLATION, PREVIOUS: "nearest"}
# Of the training crops, the share centred on a foreground voxel; the rest lie anywhere.
FOREGROUND_SHARE = 2 / 3  # nnU-Net's oversample_foreground_percent is 0.33
