"""Whole-image inference shared by validation and evaluation.

- 2D model, 2D image: one forward pass.
- 2D model, 3D volume: slice by slice along the last axis, in batches (MONAI's SliceInferer).
- 3D model: sliding window with Gaussian blending (MONAI's SlidingWindowInferer); a volume no
  larger than the window is one pass.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Sequence

import torch
from monai.data import MetaTensor
from monai.inferers import SliceInferer, SlidingWindowInferer

Network = Callable[[torch.Tensor], torch.Tensor]

# Lightning's mixed-precision names and the autocast dtype each trains under.
MIXED_PRECISION = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}


def plain(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor without MONAI metadata (slicing a batched MetaTensor splits its metadata too)."""
    return tensor.as_tensor() if isinstance(tensor, MetaTensor) else tensor


def training_autocast(precision: str, device: torch.device):
    """The autocast a model was trained under (its trainer.precision), for inference on device:
    evaluation and prediction then compute what validation computed."""
    dtype = MIXED_PRECISION.get(str(precision))
    if dtype is None or (dtype == torch.float16 and device.type != "cuda"):
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def predict_logits(
    net: Network,
    image: torch.Tensor,
    model_dims: int,
    roi_size: Sequence[int],
    sw_batch_size: int = 4,
    overlap: float = 0.5,
    slice_batch: int = 32,
) -> torch.Tensor:
    """Logits of shape (N, classes, *spatial) for an image of shape (N, C, *spatial)."""
    image_dims = image.dim() - 2
    if model_dims == 2 and image_dims == 3:  # whole slices across the last axis, slice_batch at a time
        return SliceInferer(roi_size=(-1, -1), sw_batch_size=slice_batch, spatial_dim=2, overlap=0.0)(image, net)
    if model_dims == 3 and any(s > r for s, r in zip(image.shape[2:], roi_size, strict=True)):
        inferer = SlidingWindowInferer(
            roi_size=list(roi_size), sw_batch_size=sw_batch_size, overlap=overlap, mode="gaussian",
            padding_mode="replicate",
        )
        return inferer(image, net)
    return net(image)


def predict_whole_image(net: Network, image: torch.Tensor, spatial_dims: int, inference: dict) -> torch.Tensor:
    """predict_logits with a model's `inference` settings (roi_size, sw_batch_size, overlap)."""
    return predict_logits(net, image, spatial_dims, inference["roi_size"], inference["sw_batch_size"],
                          inference["overlap"])


def probabilities_of(logits: torch.Tensor, regions: bool = False) -> torch.Tensor:
    """The softmax over the classes, or each region's sigmoid (segnet.data.regions)."""
    return logits.sigmoid() if regions else logits.softmax(1)


def predict_with_flips(
    predict: Callable[[torch.Tensor], torch.Tensor], image: torch.Tensor, axes: Sequence[int], regions: bool = False,
) -> torch.Tensor:
    """Test-time augmentation as nnU-Net mirrors: the mean probabilities (probabilities_of) over
    every combination of flips of `axes` (the model's spatial axes of the batch), the identity
    included: 4 passes in 2D, 8 in 3D."""
    combinations = [list(flipped) for n in range(len(axes) + 1) for flipped in itertools.combinations(axes, n)]
    probabilities = probabilities_of(predict(image), regions)
    for flipped in combinations[1:]:
        probabilities += probabilities_of(predict(image.flip(flipped)), regions).flip(flipped)
    return probabilities / len(combinations)
