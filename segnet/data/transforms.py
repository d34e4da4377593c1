"""MONAI transform chains for real scans.

Loading puts every volume in the plan's orientation (RAS, the slicing axis last), channel first,
crops it to the plan's box around the anatomy (segnet.data.cropping) and resamples it to the
plan's spacing (images linearly, labels by nearest neighbour; prediction inverts all three).
Intensities are normalized inside the box by modality (segnet.data.normalization): CT with the
dataset's foreground statistics, MRI and the rest per volume and channel, which removes most of
the scanner-to-scanner differences in scale and offset. Training crops are foreground-aware
(data.foreground_share of them centred on a label voxel) and augmented with rotation and scaling,
flips, intensity scale/shift, contrast (gamma), a smooth bias field and noise, so that the model
does not learn one scanner's look. In 2D slice mode a crop is one slice thick and loses its last
axis.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch
from monai import transforms as T

from segnet.data.cropping import crop_transform
from segnet.data.dataset_json import Case
from segnet.data.headers import read_problem
from segnet.data.image_files import ImageFileReader, image_loader
from segnet.data.normalization import NormalizeChannelsd
from segnet.data.samples import FOREGROUND_SHARE, MOVED_WITH_LABEL
from segnet.errors import DatasetError

KEYS = ("image", "label")
CROP_FOREGROUND = "crop_foreground"  # the label without its ignore voxels, for choosing crop centres


def case_dicts(cases: Sequence[Case]) -> list[dict]:
    """MONAI data dicts; a multi-file image (one file per channel) loads as one stacked image."""
    items = []
    for case in cases:
        item = {"image": list(case.images) if len(case.images) > 1 else case.images[0], "name": case.name}
        if case.label is not None:
            item["label"] = case.label
        items.append(item)
    return items


def load_case(chain: T.Compose, item: dict) -> dict:
    """chain(item) for an item of case_dicts, where a file its reader cannot read (a gzip stream
    that ends early, a corrupt one) stops with a DatasetError naming it in one line, not MONAI's
    traceback of the transform that failed."""
    try:
        return chain(item)
    except Exception as error:
        images = item.get("image", [])
        images = images if isinstance(images, list) else [images]
        for path in [*images, *([item["label"]] if "label" in item else [])]:
            if problem := unreadable(path):
                raise DatasetError(problem) from error
        raise


def unreadable(path: str) -> str | None:
    """Why the file at `path` cannot be read whole, in one line; None when it can. (Its header
    was checked before: segnet.data.headers.)"""
    try:
        image_loader()(path)
    except Exception as error:
        return read_problem(path, error)
    return None


def load_transforms(
    with_label: bool, normalization: Sequence[dict] | None = None, orientation: str | Sequence[int] = "RAS",
    spacing: Sequence[float] | None = None, crop: str | None = None,
) -> list:
    """Loading onto the plan's grid: the image, and the label where with_label, cropped to the
    box the plan's `crop` finds in the image (segnet.data.cropping) before the image is normalized.
    `orientation`: axis codes to reorient to first, or a permutation of the stored axes to put them
    in last (the spacing then in the stored order), as nnU-Net's plans transpose without reorienting."""
    keys = list(KEYS) if with_label else ["image"]
    stored_axes = not isinstance(orientation, str)
    steps = [
        T.LoadImaged(keys=keys, image_only=True, reader=ImageFileReader()),  # geometry travels in each MetaTensor
        T.EnsureChannelFirstd(keys=keys),
        *([] if stored_axes else [T.Orientationd(keys=keys, axcodes=orientation, labels=None)]),
        *crop_transform(keys, crop),
        # by modality (segnet.data.normalization), on the stored voxels as nnU-Net does, before
        # resampling can blur the body's edge into the background
        NormalizeChannelsd(keys="image", plan=normalization),
    ]
    if spacing is not None:  # a spacing of 0 keeps the image's own along that axis (2D plans)
        modes = {"image": "bilinear", "label": "nearest"}
        steps.append(T.Spacingd(keys=keys, pixdim=list(spacing), mode=[modes[key] for key in keys],
                                padding_mode="border"))
    if stored_axes:
        steps.append(T.Transposed(keys=keys, indices=[0, *(axis + 1 for axis in orientation)]))
    steps.append(T.EnsureTyped(keys="image", dtype="float32"))
    if with_label:
        steps.append(T.EnsureTyped(keys="label", dtype="int64"))
    return steps


def without_ignored(label: torch.Tensor, ignore_label: int) -> torch.Tensor:
    return torch.where(label == ignore_label, 0, label)


def train_transforms(
    patch_size: Sequence[int], spatial_dims: int, samples_per_volume: int, affine: bool = True,
    ignore_label: int | None = None, foreground_share: float = FOREGROUND_SHARE, **geometry,
) -> T.Compose:
    crop = list(patch_size[:2]) + [1] if spatial_dims == 2 else list(patch_size)
    steps = load_transforms(with_label=True, **geometry) + [T.SpatialPadd(keys=list(KEYS), spatial_size=crop)]
    # Foreground from the label alone (normalized intensities say nothing about it: CT air is as
    # negative as anything), ignored voxels not among it, as nnU-Net leaves them out.
    foreground = "label" if ignore_label is None else CROP_FOREGROUND
    if ignore_label is not None:
        steps += [T.CopyItemsd(keys="label", names=CROP_FOREGROUND),
                  T.Lambdad(keys=CROP_FOREGROUND, func=functools.partial(without_ignored, ignore_label=ignore_label))]
    steps.append(T.RandCropByPosNegLabeld(keys=list(KEYS), label_key=foreground, spatial_size=crop,
                                          pos=foreground_share, neg=1 - foreground_share,
                                          num_samples=samples_per_volume))
    if ignore_label is not None:
        steps.append(T.DeleteItemsd(keys=CROP_FOREGROUND))
    if spatial_dims == 2:
        steps.append(T.SqueezeDimd(keys=list(KEYS), dim=-1))
    return T.Compose(steps + augmentation_transforms(spatial_dims, affine))


def augmentation_transforms(spatial_dims: int, affine: bool = True, maps: Sequence[str] = ()) -> list:
    """The random part of training, on each crop in the loader's workers (data.augment_on=workers;
    segnet.data.device_augmentation does the same on the batch, on the device); affine=False
    (data.affine_augmentation=false, the recipe ablation's no_affine) leaves out the rotation and scaling.
    `maps`, the label's derived maps in the crop (and a cascade's first stage), move with it
    (MOVED_WITH_LABEL)."""
    moved = [*KEYS, *maps]
    # nnU-Net's spatial augmentation: rotation (+-15 degrees about every axis) and scaling
    # (0.85 to 1.15), each crop with probability 0.2; labels by nearest neighbour.
    steps = [T.RandAffined(
        keys=moved, prob=0.2, rotate_range=[math.pi / 12] * (1 if spatial_dims == 2 else 3),
        scale_range=[0.15] * spatial_dims, mode=("bilinear", "nearest", *(MOVED_WITH_LABEL[m] for m in maps)),
        padding_mode="zeros",
    )] if affine else []
    steps.append(T.EnsureTyped(keys="label", dtype="int64"))
    steps += [T.RandFlipd(keys=moved, prob=0.5, spatial_axis=axis) for axis in range(spatial_dims)]
    steps += [
        T.RandScaleIntensityd(keys="image", factors=0.1, prob=0.5),
        T.RandShiftIntensityd(keys="image", offsets=0.1, prob=0.5),
        T.RandAdjustContrastd(keys="image", gamma=(0.7, 1.5), prob=0.3),
        T.RandBiasFieldd(keys="image", coeff_range=(0.0, 0.3), prob=0.5),
        T.RandGaussianNoised(keys="image", std=0.05, prob=0.2),
        # Crops need no geometry any more; plain tensors also batch cleanly after a squeeze.
        T.EnsureTyped(keys=moved, track_meta=False),
    ]
    return steps


def eval_transforms(with_label: bool, **geometry) -> T.Compose:
    """Loading as training does; `geometry`: normalization, orientation and spacing of the plan."""
    return T.Compose(load_transforms(with_label, **geometry))
