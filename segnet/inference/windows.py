"""Whole-image inference shared by validation and evaluation.

- 2D model, 2D image: one forward pass.
- 2D model, 3D volume: slice by slice along the last axis, in batches (MONAI's SliceInferer).
- 3D model: sliding window with Gaussian blending (MONAI's SlidingWindowInferer); a volume no
  larger than the window is one pass.
"""

from __future__ import annotations

import contextlib
import itertools
import warnings
from collections.abc import Callable, Iterator, Sequence

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
    output_device: torch.device | None = None,
) -> torch.Tensor:
    """Logits of shape (N, classes, *spatial) for an image of shape (N, C, *spatial), the windows
    run on the image's device and the whole image's logits accumulated on `output_device` (None:
    the image's; MONAI's sw_device and device)."""
    image_dims = image.dim() - 2
    if model_dims == 2 and image_dims == 3:  # whole slices across the last axis, slice_batch at a time
        inferer = SliceInferer(roi_size=(-1, -1), sw_batch_size=slice_batch, spatial_dim=2, overlap=0.0,
                               sw_device=image.device, device=output_device)
        return inferer(image, net)
    if model_dims == 3 and any(s > r for s, r in zip(image.shape[2:], roi_size, strict=True)):
        inferer = SlidingWindowInferer(
            roi_size=list(roi_size), sw_batch_size=sw_batch_size, overlap=overlap, mode="gaussian",
            padding_mode="replicate", sw_device=image.device, device=output_device,
        )
        return inferer(image, net)
    logits = net(image)
    return logits if output_device is None else logits.to(output_device)


def on_device_or_host(run: Callable[[torch.device | None], torch.Tensor], device: torch.device,
                      shape: Sequence[int]) -> torch.Tensor:
    """run(None): the windows run on `device` and the whole image accumulates there. When the
    device's memory runs out, run(cpu): the same windows on the device, the whole image in host
    memory (slower: every window's output crosses to the host), as nnU-Net's predictor falls back
    and MONAI's device= allows."""
    try:
        return run(None)
    except torch.OutOfMemoryError as error:
        if device.type == "cpu":
            raise
        first_line = str(error).splitlines()[0] if str(error) else "out of memory"
        warnings.warn(f"the whole image of shape {tuple(shape)} did not fit in the memory of {device} ({first_line}): "
                      "accumulating it in host memory instead, which is slower", stacklevel=2)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # the failed attempt's blocks, before the windows run again
        return run(torch.device("cpu"))


def predict_whole_image(net: Network, image: torch.Tensor, spatial_dims: int, inference: dict,
                        output_device: torch.device | None = None) -> torch.Tensor:
    """predict_logits with a model's `inference` settings (roi_size, sw_batch_size, overlap)."""
    return predict_logits(net, image, spatial_dims, inference["roi_size"], inference["sw_batch_size"],
                          inference["overlap"], output_device=output_device)


def probabilities_of(logits: torch.Tensor, regions: bool = False) -> torch.Tensor:
    """The softmax over the classes, or each region's sigmoid (segnet.data.regions)."""
    return logits.sigmoid() if regions else logits.softmax(1)


def flipped_probabilities(
    predict: Callable[[torch.Tensor], torch.Tensor], image: torch.Tensor, axes: Sequence[int], regions: bool = False,
) -> Iterator[torch.Tensor]:
    """Test-time augmentation as nnU-Net mirrors: the probabilities (probabilities_of) of every
    combination of flips of `axes` (the model's spatial axes of the batch), the identity first,
    each flipped back: 4 in 2D, 8 in 3D."""
    for n in range(len(axes) + 1):
        for flipped in itertools.combinations(axes, n):
            if not flipped:
                yield probabilities_of(predict(image), regions)
                continue
            yield probabilities_of(predict(image.flip(list(flipped))), regions).flip(list(flipped))


def predict_with_flips(
    predict: Callable[[torch.Tensor], torch.Tensor], image: torch.Tensor, axes: Sequence[int], regions: bool = False,
) -> torch.Tensor:
    """The mean of flipped_probabilities."""
    probabilities, count = None, 0
    for each in flipped_probabilities(predict, image, axes, regions):
        probabilities = each if probabilities is None else probabilities.add_(each)
        count += 1
    return probabilities / count
