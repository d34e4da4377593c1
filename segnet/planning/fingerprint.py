"""A dataset's fingerprint, as nnU-Net's: what planning needs, from one read of every case.

Per case: the voxel spacing and shape in RAS axis order (whatever orientation the file is stored
in, so cases stored in LPS, or with permuted axes, compare axis for axis), the voxels of each
class, the share of the volume in the bounding box of its non-zero voxels (any channel;
nnU-Net's crop: whether the dataset is masked, which decides how MRI is z-scored), and for each
crop rule (segnet.data.cropping) the shape of its box and how far inside it the labels stay
(which decides the plan's crop). Per channel:
mean, standard deviation and 0.5 / 99.5 percentiles of the intensities under the labels
(label > 0, the ignore label left out), from up to SAMPLES_PER_CASE voxels of every case: CT
normalization uses them. The same read is the integrity check (segnet.planning.integrity): a
case is fingerprinted only if it is sound. segnet.planning.record
makes both once per dataset and keeps them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import nibabel as nib
import numpy as np

from segnet.data.cropping import CROPS, crop_box
from segnet.data.dataset_json import Case, DatasetDescription, case_seed

SAMPLES_PER_CASE = 10_000  # foreground voxels drawn per case and channel, as nnU-Net's fingerprint


def ras_geometry(affine: np.ndarray, shape: Sequence[int]) -> tuple[list[float], list[int]]:
    """Spacing (mm) and size of a volume along R, A and S: the voxel axes permuted to the world
    axes they are closest to."""
    affine = np.asarray(affine, np.float64)
    dims = len(shape)
    voxel_sizes = np.linalg.norm(affine[:dims, :dims], axis=0)
    world_axis = nib.io_orientation(affine)[:dims, 0].astype(int)
    spacing, size = [0.0] * dims, [0] * dims
    for voxel_axis, axis in enumerate(world_axis):
        spacing[axis], size[axis] = float(voxel_sizes[voxel_axis]), int(shape[voxel_axis])
    return spacing, size


def intensity_statistics(values: np.ndarray) -> dict[str, float]:
    values = values if values.size else np.zeros(1)
    return {"mean": float(values.mean()), "std": float(values.std()),
            "percentile_00_5": float(np.percentile(values, 0.5)), "percentile_99_5": float(np.percentile(values, 99.5))}


def case_fingerprint(case: Case, loaded: dict[str, Any], description: DatasetDescription) -> tuple[dict, np.ndarray]:
    """One sound case's entry (name, RAS spacing and shape, voxels per class) and its sampled
    foreground intensities, (channels, up to SAMPLES_PER_CASE): drawn with a generator seeded by
    the case's name, so a case's samples do not depend on the other cases."""
    label = np.asarray(loaded[case.label])
    spacing, shape = ras_geometry(np.asarray(loaded[case.images[0]].affine), label.shape)
    values = max(description.label_values) + 1  # the classes' values, or every value of a region
    counts = np.bincount(label.astype(np.int64).ravel(), minlength=values)
    entry = {"name": case.name, "spacing": spacing, "shape": shape,
             "class_voxels": [int(v) for v in counts[:values]]}
    images = [np.asarray(loaded[path]) for path in case.images]
    foreground = label > 0
    if description.ignore_label is not None:
        foreground &= label != description.ignore_label
    entry["nonzero_share"] = nonzero_share(images, label.shape)
    entry["crops"] = crops(images, foreground, np.asarray(loaded[case.images[0]].affine))
    foreground = np.flatnonzero(foreground)
    rng = np.random.default_rng(case_seed(case.name))
    chosen = np.sort(rng.choice(foreground, size=min(SAMPLES_PER_CASE, foreground.size), replace=False))
    samples = []
    for channel in range(description.in_channels):
        image = images[channel if len(case.images) > 1 else 0]
        if len(case.images) == 1 and image.ndim == label.ndim + 1:
            image = image[..., channel]  # one file holding every channel, channels last
        samples.append(image.ravel()[chosen].astype(np.float32))
    return entry, np.stack(samples)


def crops(images: Sequence[np.ndarray], foreground: np.ndarray, affine: np.ndarray) -> dict[str, dict[str, Any]]:
    """Per crop rule (segnet.data.cropping) but "none": the shape of its box (RAS axis order, as the
    case's shape) and label_margin: how far inside the box the `foreground` voxels (labelled, not
    ignored) stay."""
    shape = foreground.shape
    channels = [image.reshape(*shape, -1) for image in images]  # a view where one file holds them all
    channel_first = np.moveaxis(channels[0] if len(channels) == 1 else np.concatenate(channels, axis=-1), -1, 0)
    labelled = np.argwhere(foreground)
    found = {}
    for crop in CROPS[1:]:
        start, end = crop_box(channel_first, crop)
        found[crop] = {"shape": ras_geometry(affine, [e - s for s, e in zip(start, end, strict=True)])[1],
                       "label_margin": label_margin(labelled, start, end, shape)}
    return found


def label_margin(labelled: np.ndarray, start: Sequence[int], end: Sequence[int], shape: Sequence[int]) -> float:
    """The least distance from a face of the box [start, end) to the labelled voxels (N, axes) inside
    it, as a share of the box's extent along that face's axis, over the faces that cut the volume
    (a face on the volume's own border cuts nothing); negative where a labelled voxel lies outside,
    infinite where nothing is labelled or cut."""
    if labelled.size == 0:
        return math.inf
    margins = [math.inf]
    for axis, (s, e, size) in enumerate(zip(start, end, shape, strict=True)):
        lowest, highest = int(labelled[:, axis].min()), int(labelled[:, axis].max()) + 1
        if s > 0:
            margins.append((lowest - s) / (e - s))
        if e < size:
            margins.append((e - highest) / (e - s))
    return min(margins)


def nonzero_share(images: Sequence[np.ndarray], shape: Sequence[int]) -> float:
    """The share of a volume of `shape` in the bounding box of the voxels non-zero in any of `images`
    (each of that shape, or with its channels last)."""
    nonzero = np.zeros(shape, bool)
    for image in images:
        nonzero |= (image != 0).reshape(*shape, -1).any(-1)
    if not nonzero.any():
        return 0.0
    box = [np.flatnonzero(nonzero.any(axis=tuple(a for a in range(nonzero.ndim) if a != axis)))
           for axis in range(nonzero.ndim)]
    return float(np.prod([b[-1] - b[0] + 1 for b in box]) / nonzero.size)


def summarize(description: DatasetDescription, entries: Sequence[dict], samples: Sequence[np.ndarray]) -> dict:
    """The fingerprint of the cases of these entries and samples (in the same order)."""
    pooled = np.concatenate(samples, axis=1) if samples else np.zeros((description.in_channels, 0))
    return {
        "cases": list(entries),
        "foreground_intensities": [{"channel": name, **intensity_statistics(values)}
                                   for name, values in zip(description.channel_names, pooled, strict=True)],
    }
