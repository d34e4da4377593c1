"""A dataset's fingerprint, as nnU-Net's: what planning needs, from one read of every case.

Per case: the voxel spacing and shape in RAS axis order (whatever orientation the file is stored
in, so cases stored in LPS, or with permuted axes, compare axis for axis), and the voxels of
each class. Per channel: mean, standard deviation and 0.5 / 99.5 percentiles of the intensities
under the labels (label > 0), from up to SAMPLES_PER_CASE voxels of every case: CT
normalization uses them. The same pass is the integrity check (segnet.planning.integrity): a case
is fingerprinted only if it is sound, and a broken dataset stops here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import nibabel as nib
import numpy as np

from segnet.data.dataset_json import Case, DatasetDescription
from segnet.data.headers import MAX_VOXELS
from segnet.planning.integrity import verify_dataset

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


def fingerprint_dataset(description: DatasetDescription, cases: Sequence[Case], seed: int = 1234,
                        max_voxels: int = MAX_VOXELS) -> dict[str, Any]:
    """The fingerprint of these (labelled) cases; a DatasetError listing every broken case instead
    if the dataset does not pass the integrity check."""
    rng = np.random.default_rng(seed)
    per_case: list[dict[str, Any]] = []
    samples: list[list[np.ndarray]] = [[] for _ in description.channel_names]

    def inspect(case: Case, loaded: dict[str, Any]) -> None:
        label = np.asarray(loaded[case.label])
        spacing, shape = ras_geometry(np.asarray(loaded[case.images[0]].affine), label.shape)
        counts = np.bincount(label.astype(np.int64).ravel(), minlength=description.num_classes)
        per_case.append({"name": case.name, "spacing": spacing, "shape": shape,
                         "class_voxels": [int(v) for v in counts[: description.num_classes]]})
        foreground = label > 0
        if description.ignore_label is not None:
            foreground &= label != description.ignore_label
        for channel in range(description.in_channels):
            image = np.asarray(loaded[case.images[channel] if len(case.images) > 1 else case.images[0]])
            if len(case.images) == 1 and image.ndim == label.ndim + 1:
                image = image[..., channel]  # one file holding every channel, channels last
            values = image[foreground]
            if values.size:
                samples[channel].append(rng.choice(values, size=min(SAMPLES_PER_CASE, values.size), replace=False))

    verify_dataset(description, cases, inspect, max_voxels)
    return {
        "cases": per_case,
        "foreground_intensities": [
            {"channel": name, **intensity_statistics(np.concatenate(s) if s else np.zeros(0))}
            for name, s in zip(description.channel_names, samples, strict=True)
        ],
    }
