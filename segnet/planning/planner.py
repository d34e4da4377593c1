"""From a dataset's fingerprint to its plan: how every case is resampled, oriented, normalized
and cropped, for a 2D and a 3D model, in the spirit of nnU-Net's experiment planner.

- Target spacing: the median spacing per axis. For strongly anisotropic data (the coarsest axis
  more than ANISOTROPY times the next, and the volume more than ANISOTROPY times smaller along
  it than across) the coarse axis goes to the 10th percentile of its spacings instead (but never
  finer than the other axes), so that thin-slice cases are not thrown away by the median.
- Orientation: RAS, with the slicing axis (the out-of-plane, lowest-resolution one) moved last:
  a 2D model sees in-plane slices, and the 3D model the same axis order. Prediction undoes it.
- 2D keeps each case's own spacing along the slicing axis and resamples only in plane.
- Patch size: the median resampled shape, rounded up to the network's total stride, shrunk (the
  axis of largest physical extent first) until a batch of MIN_BATCH fits the memory budget;
  batch size: what the budget allows, at most BATCH_SHARE of the dataset's voxels per step.
- Memory: the bytes the network saves for its backward pass per voxel of a patch, counted by
  autograd's saved-tensor hooks on one small patch (a static count, not a timing) and scaled by
  the patch's voxels. The count uses the python op, which saves more than the fused one, so the
  estimate errs on the safe side whatever backend trains.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from segnet.data.dataset_json import DatasetDescription
from segnet.data.normalization import normalization_plan

ANISOTROPY = 3.0
MIN_BATCH = 2
BATCH_SHARE = 0.05  # of the dataset's voxels in one step, at most (nnU-Net's)
RAS = "RAS"


def target_spacing(spacings: np.ndarray, shapes: np.ndarray) -> np.ndarray:
    """Per-axis target spacing of cases' (N, 3) spacings and shapes, in the same axis order."""
    target = np.median(spacings, axis=0)
    median_shape = np.median(shapes, axis=0)
    coarse = int(np.argmax(target))
    others = [a for a in range(len(target)) if a != coarse]
    coarsest_other = max(target[a] for a in others)
    anisotropic_spacing = target[coarse] > ANISOTROPY * coarsest_other
    few_slices = median_shape[coarse] * ANISOTROPY < min(median_shape[a] for a in others)
    if anisotropic_spacing and few_slices:
        target[coarse] = max(float(np.percentile(spacings[:, coarse], 10)), coarsest_other)
    return target


def slicing_axis(spacing: Sequence[float]) -> int:
    """The lowest-resolution axis (ties: the last, S for isotropic data)."""
    spacing = list(spacing)
    return max(range(len(spacing)), key=lambda a: (spacing[a], a))


def orientation(axis: int) -> str:
    """RAS with the slicing axis last, e.g. "ASR" to slice along R (sagittal)."""
    return RAS.replace(RAS[axis], "") + RAS[axis]


def saved_bytes_per_voxel(model: dict[str, Any], spatial_dims: int, in_channels: int, num_classes: int) -> float:
    """Bytes of activations the network keeps for its backward pass, per voxel of its input."""
    from segnet.model.network import build_network  # only a plan needs the network: not --verify

    net = build_network(model, "python", spatial_dims=spatial_dims, in_channels=in_channels, out_channels=num_classes)
    side = 2 * int(np.prod(model["strides"]))
    x = torch.zeros(1, in_channels, *[side] * spatial_dims)
    weights = {p.data_ptr() for p in net.parameters()}
    seen: dict[int, int] = {}

    def count(t: torch.Tensor) -> torch.Tensor:
        if t.data_ptr() not in weights:
            seen[t.data_ptr()] = max(seen.get(t.data_ptr(), 0), t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(count, lambda t: t):
        net(x.requires_grad_()).sum()
    return sum(seen.values()) / x[0, 0].numel()


def patch_and_batch(
    median_shape: Sequence[float], spacing: Sequence[float], stride: int, bytes_per_voxel: float, budget_bytes: float,
    dataset_voxels: float,
) -> tuple[list[int], int]:
    patch = [stride * max(1, math.ceil(s / stride)) for s in median_shape]
    while bytes_per_voxel * np.prod(patch) * MIN_BATCH > budget_bytes:
        shrinkable = [a for a in range(len(patch)) if patch[a] > stride]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda a: patch[a] * spacing[a])
        patch[widest] -= stride
    voxels = float(np.prod(patch))
    fits = int(budget_bytes // (bytes_per_voxel * voxels))
    share = int(BATCH_SHARE * dataset_voxels // voxels)
    return patch, max(MIN_BATCH, min(fits, share))


def _mm(value: float) -> float:
    """A spacing as the plan writes it: to the micrometre (file headers store float32 noise)."""
    return round(float(value), 6)


def plan_dataset(
    description: DatasetDescription, fingerprint: dict[str, Any], model: dict[str, Any], memory_budget_gb: float
) -> dict[str, Any]:
    cases = fingerprint["cases"]  # 3D volumes all: the integrity check names any other
    spacings = np.array([c["spacing"] for c in cases], np.float64)
    shapes = np.array([c["shape"] for c in cases], np.float64)
    ras_target = target_spacing(spacings, shapes)
    axis = slicing_axis(ras_target)
    order = [RAS.index(code) for code in orientation(axis)]  # plan axis -> RAS axis
    spacing = ras_target[order]
    resampled = shapes[:, order] * spacings[:, order] / spacing
    median_shape = np.median(resampled, axis=0)
    dataset_voxels = float(resampled.prod(axis=1).sum())
    stride = int(np.prod(model["strides"]))
    budget = memory_budget_gb * 2**30
    configurations = {}
    for dims in (2, 3):
        per_voxel = saved_bytes_per_voxel(model, dims, description.in_channels, description.num_classes)
        patch, batch = patch_and_batch(median_shape[:dims], spacing[:dims], stride, per_voxel, budget, dataset_voxels)
        configurations[f"{dims}d"] = {
            # 2D: in plane only; 0 keeps each case's own spacing along the slicing axis
            "spacing": [_mm(s) for s in spacing[:2]] + ([_mm(spacing[2])] if dims == 3 else [0.0]),
            "patch_size": patch, "batch_size": batch, "saved_bytes_per_voxel": per_voxel,
        }
    return {
        "dataset": str(description.root),
        "orientation": orientation(axis),
        "slicing_axis": RAS[axis],
        "target_spacing": [_mm(s) for s in spacing],
        "median_shape": [round(float(s), 1) for s in median_shape],
        "memory_budget_gb": memory_budget_gb,
        "network_stride": stride,
        "normalization": normalization_plan(description.channel_names, fingerprint["foreground_intensities"]),
        "class_voxels": [int(v) for v in np.sum([c["class_voxels"] for c in cases], axis=0)],
        "configurations": configurations,
        "fingerprint": fingerprint,
    }
