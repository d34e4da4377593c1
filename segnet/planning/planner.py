"""From a dataset's fingerprint to its plan: how every case is resampled, oriented, normalized
and cropped, for a 2D and a 3D model, in the spirit of nnU-Net's experiment planner.

- Target spacing: the median spacing per axis. For strongly anisotropic data (the coarsest axis
  more than ANISOTROPY times the next, and the volume more than ANISOTROPY times smaller along
  it than across) the coarse axis goes to the 10th percentile of its spacings instead (but never
  finer than the other axes), so that thin-slice cases are not thrown away by the median.
- Orientation: RAS, with the slicing axis (the out-of-plane, lowest-resolution one) moved last:
  a 2D model sees in-plane slices, and the 3D model the same axis order. Prediction undoes it.
- 2D keeps each case's own spacing along the slicing axis and resamples only in plane.
- Crop (before normalizing, as nnU-Net crops to the non-zero region): segnet.data.cropping's
  body box where every case's labels lie well inside it, else the non-zero box where it holds
  them (crop_rule); the shapes below are the boxes' shapes.
- Patch size: the median resampled shape, rounded up to the network's total stride, shrunk (the
  axis of largest physical extent first) until a batch of MIN_BATCH fits the memory budget;
  batch size: what the budget allows, at most BATCH_SHARE of the dataset's voxels per step.
- The network sized by the plan (segnet.planning.network_shape, nnU-Net's rule): proposed for the
  median shape, its patch and batch found the same way with its own memory count, and the
  network's shape made again for the patch that fits. A model whose channels or strides are left open
  (model=resenc) trains that proposal (the configuration's patch and batch are the proposal's);
  a fixed one (model=edge_unet) gets a patch and batch of its own.
- Memory: the bytes the network saves for its backward pass per voxel of a patch, counted by
  autograd's saved-tensor hooks on one small patch (a static count, not a timing) and scaled by
  the patch's voxels. The count uses the python op, which saves more than the fused one, so the
  estimate errs on the safe side whatever backend trains.
- The device: a plan for a GPU fits the memory budget alone. A plan for a CPU also fits a compute
  budget, the FLOPs of one training step (forward and backward, counted by FlopCounterMode on one
  small patch and scaled the same way): patch first, as nnU-Net keeps it, so the batch goes down
  to MIN_BATCH before the patch shrinks. plans.json states the budget it assumed.
- Configurations (nnU-Net's): 2d and 3d (full resolution), no 3d for a 2D dataset, and 3d_lowres
  where the 3d patch covers less than LOWRES_COVERAGE of the median image's voxels: the spacing
  coarsened by LOWRES_STEP at a time (the axes finer than half the coarsest first, then all)
  until the patch planned there covers that share; with it, 3d_cascade_fullres: 3d's spacing,
  patch and batch, its input also 3d_lowres's label map. Each configuration says why it exists.
"""

from __future__ import annotations

import functools
import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from segnet.data.cropping import checked_crop
from segnet.data.dataset_json import DatasetDescription
from segnet.data.normalization import normalization_plan
from segnet.model.strides import total_strides
from segnet.planning.network_shape import network_shape

log = logging.getLogger(__name__)

ANISOTROPY = 3.0
# A CPU step's compute: make train's (16 crops of 96 x 96 through edge_unet, forward and backward).
CPU_STEP_GFLOPS = 23.25
MIN_BATCH = 2
BATCH_SHARE = 0.05  # of the dataset's voxels in one step, at most (nnU-Net's)
RAS = "RAS"
CASCADE = "3d_cascade_fullres"
LOWRES_COVERAGE = 0.25  # nnU-Net's: below this share of the median image in one 3d patch, a 3d_lowres too
LOWRES_STEP = 1.03  # nnU-Net's factor per coarsening step
# Of a body box's extent, between its faces and the labels, in every case (crop_rule): labels that
# touch their box (the labelled structure is the bright part) get none; one slice of scalp over a
# brain's top in 21 slices (4.8 %) is anatomy around the labels
BODY_MARGIN = 0.02


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


def slicing_axis(spacing: Sequence[float], median_shape: Sequence[float]) -> int:
    """The axis a 2D dataset's images lack (one voxel thick: natural images, single slices), else
    the lowest-resolution axis (ties: the last, S for isotropic data)."""
    flat = [a for a in range(len(median_shape)) if median_shape[a] <= 1]
    if flat:
        return flat[-1]
    spacing = list(spacing)
    return max(range(len(spacing)), key=lambda a: (spacing[a], a))


def orientation(axis: int) -> str:
    """RAS with the slicing axis last, e.g. "ASR" to slice along R (sagittal)."""
    return RAS.replace(RAS[axis], "") + RAS[axis]


def network_and_patch(model: dict[str, Any], spatial_dims: int, in_channels: int, num_classes: int):
    """The model's network in training mode and the smallest patch that reaches its bottleneck
    with two voxels per axis (what the counts below are taken on)."""
    from segnet.model.network import build_network  # only a plan needs the network: not --verify

    net = build_network(model, "python", spatial_dims=spatial_dims, in_channels=in_channels, out_channels=num_classes)
    return net, torch.zeros(1, in_channels, *[2 * s for s in total_strides(model["strides"], spatial_dims)])


def total_logits(outputs: torch.Tensor | list[torch.Tensor]) -> torch.Tensor:
    """One scalar of a forward's outputs (a deeply supervised network returns several)."""
    return sum(o.sum() for o in outputs) if isinstance(outputs, list) else outputs.sum()


def remembered(count: Callable[..., float]) -> Callable[..., float]:
    """`count(model, spatial_dims, in_channels, num_classes)` computed once per arguments: the
    3d_lowres search plans a fixed network at many spacings."""
    counts: dict[tuple, float] = {}

    @functools.wraps(count)
    def once(model: dict[str, Any], *args: int) -> float:
        key = (json.dumps(model, sort_keys=True), *args)
        if key not in counts:
            counts[key] = count(model, *args)
        return counts[key]

    return once


@remembered
def step_flops_per_voxel(model: dict[str, Any], spatial_dims: int, in_channels: int, num_classes: int) -> float:
    """The floating-point operations of a training step (forward and backward) per voxel of its
    input, counted by torch's FlopCounterMode (convolutions and matrix products: the bulk)."""
    net, x = network_and_patch(model, spatial_dims, in_channels, num_classes)
    with FlopCounterMode(display=False) as counter:
        total_logits(net(x)).backward()
    return counter.get_total_flops() / x[0, 0].numel()


@remembered
def saved_bytes_per_voxel(model: dict[str, Any], spatial_dims: int, in_channels: int, num_classes: int) -> float:
    """Bytes of activations the network keeps for its backward pass, per voxel of its input."""
    net, x = network_and_patch(model, spatial_dims, in_channels, num_classes)
    weights = {p.data_ptr() for p in net.parameters()}
    seen: dict[int, int] = {}

    def count(t: torch.Tensor) -> torch.Tensor:
        if t.data_ptr() not in weights:
            seen[t.data_ptr()] = max(seen.get(t.data_ptr(), 0), t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(count, lambda t: t):
        total_logits(net(x.requires_grad_()))
    return sum(seen.values()) / x[0, 0].numel()


def patch_and_batch(
    median_shape: Sequence[float], spacing: Sequence[float], stride: Sequence[int], bytes_per_voxel: float,
    budget_bytes: float, dataset_voxels: float,
) -> tuple[list[int], int]:
    """The patch (a multiple of the network's `stride` per axis) and batch of a memory budget."""
    patch = [k * max(1, math.ceil(s / k)) for s, k in zip(median_shape, stride, strict=True)]
    while bytes_per_voxel * np.prod(patch) * MIN_BATCH > budget_bytes:
        shrinkable = [a for a in range(len(patch)) if patch[a] > stride[a]]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda a: patch[a] * spacing[a])
        patch[widest] -= stride[widest]
    voxels = float(np.prod(patch))
    fits = int(budget_bytes // (bytes_per_voxel * voxels))
    share = int(BATCH_SHARE * dataset_voxels // voxels)
    return patch, max(MIN_BATCH, min(fits, share))


@dataclass(frozen=True)
class Budget:
    """What one training step may take: memory on any device; on a CPU also compute, in GFLOPs
    (a step's time is about its FLOPs over the machine's rate, and FLOPs can be counted)."""

    memory_gb: float
    step_gflops: float | None = None  # None: a GPU, where memory is the limit

    @property
    def device(self) -> str:
        return "gpu" if self.step_gflops is None else "cpu"


@dataclass(frozen=True)
class Dataset:
    """What patch and batch fitting needs of the dataset."""

    in_channels: int
    num_classes: int
    voxels: float  # resampled, over every case


def fitted_patch_and_batch(
    model: dict[str, Any], median_shape: Sequence[float], spacing: Sequence[float], budget: Budget, dataset: Dataset,
) -> dict[str, Any]:
    """The patch and batch of the model's network within the budget, with the counts they rest on."""
    dims = len(spacing)
    stride = total_strides(model["strides"], dims)
    per_voxel = saved_bytes_per_voxel(model, dims, dataset.in_channels, dataset.num_classes)
    patch, batch = patch_and_batch(median_shape, spacing, stride, per_voxel, budget.memory_gb * 2**30, dataset.voxels)
    fit = {"saved_bytes_per_voxel": per_voxel}
    if budget.step_gflops is not None:
        flops = step_flops_per_voxel(model, dims, dataset.in_channels, dataset.num_classes)
        patch, affordable = patch_and_batch(patch, spacing, stride, flops, budget.step_gflops * 1e9, dataset.voxels)
        batch = min(batch, affordable)
        fit["step_flops_per_voxel"] = flops
    return {"patch_size": patch, "batch_size": batch, **fit}


def sized_network(
    model: dict[str, Any], median_shape: Sequence[float], spacing: Sequence[float], budget: Budget, dataset: Dataset,
) -> dict[str, Any]:
    """The network the plan proposes for a configuration, with the patch and batch it trains."""
    proposed = network_shape(spacing, [math.ceil(s) for s in median_shape])
    fit = fitted_patch_and_batch({**model, "channels": proposed.channels, "strides": proposed.strides},
                                 proposed.patch_size, spacing, budget, dataset)
    fitting = network_shape(spacing, fit["patch_size"])  # fewer levels where the patch had to shrink
    return {"channels": fitting.channels, "strides": fitting.strides, **fit, "patch_size": fitting.patch_size}


def is_sized_by_plan(model: dict[str, Any]) -> bool:
    """A model config that leaves its channels or strides to the plan (conf/model/resenc.yaml); an
    nnU-Net model's network (segnet.nnunet.run_model) is its plan's."""
    return model.get("network") != "nnunet" and (model.get("channels") is None or model.get("strides") is None)


def _mm(value: float) -> float:
    """A spacing as the plan writes it: to the micrometre (file headers store float32 noise)."""
    return round(float(value), 6)


def planned_configuration(
    model: dict[str, Any], median_shape: Sequence[float], spacing: Sequence[float], budget: Budget, dataset: Dataset,
    samples_per_volume: int,
) -> dict[str, Any]:
    """One configuration's patch and batch, for the model it is planned with: a fixed network's
    own, or, for a model sized by the plan, the network it proposes and that network's. The batch
    in the configuration's units: volumes per step (data.batch_size), each giving
    `samples_per_volume` crops; the budget fits `crops_per_step`."""
    if is_sized_by_plan(model):
        network = sized_network(model, median_shape, spacing, budget, dataset)
        fit = {key: value for key, value in network.items() if key not in ("channels", "strides")}
        proposal = {"network": {"channels": network["channels"], "strides": network["strides"]}}
    else:
        fit, proposal = fitted_patch_and_batch(model, median_shape, spacing, budget, dataset), {}
    crops = fit.pop("batch_size")
    return {"patch_size": fit.pop("patch_size"), "batch_size": volumes_per_step(crops, samples_per_volume),
            "samples_per_volume": samples_per_volume, "crops_per_step": crops, **proposal, **fit}


def volumes_per_step(crops: int, samples_per_volume: int) -> int:
    """The volumes a step loads for `crops` crops, `samples_per_volume` from each (at least one)."""
    return max(1, math.ceil(crops / samples_per_volume))


def coverage(patch: Sequence[int], median_shape: Sequence[float]) -> float:
    """The share of the median image's voxels one patch covers."""
    return float(np.prod(np.asarray(patch, np.float64)) / np.prod(np.asarray(median_shape, np.float64)))


def lowres_configuration(
    model: dict[str, Any], median_shape: np.ndarray, spacing: np.ndarray, fullres: dict[str, Any], budget: Budget,
    dataset: Dataset, samples_per_volume: int,
) -> dict[str, Any] | None:
    """nnU-Net's 3d_lowres, where the full-resolution patch covers less than LOWRES_COVERAGE of the
    median image: the spacing coarsened step by step (axes finer than half the coarsest first)
    and the configuration planned there again, until its patch covers that share; else None."""
    covered = coverage(fullres["patch_size"], median_shape)
    if covered >= LOWRES_COVERAGE:
        return None
    coarse, planned, shape = spacing.astype(np.float64), None, median_shape
    while planned is None or coverage(planned["patch_size"], shape) < LOWRES_COVERAGE:
        fine = coarse.max() / coarse > 2
        coarse = np.where(fine, coarse * LOWRES_STEP, coarse) if fine.any() else coarse * LOWRES_STEP
        shape = median_shape * spacing / coarse
        at_coarse = Dataset(dataset.in_channels, dataset.num_classes, dataset.voxels * float(np.prod(spacing / coarse)))
        planned = planned_configuration(model, shape, coarse, budget, at_coarse, samples_per_volume)
    why = (f"the 3d patch covers {covered:.1%} of the median image's voxels, under nnU-Net's "
           f"{LOWRES_COVERAGE:.0%}: at this spacing its patch covers {coverage(planned['patch_size'], shape):.1%}")
    return {"spacing": [_mm(s) for s in coarse], **planned, "median_shape": [round(float(s), 1) for s in shape],
            "why": why}


def closest_labels(cases: Sequence[dict[str, Any]], crop: str) -> tuple[float, str]:
    """The least label margin of `crop`'s boxes over the cases (segnet.planning.fingerprint), and whose."""
    return min((case["crops"][crop]["label_margin"], case.get("name", "?")) for case in cases)


def warn_of_cut_labels(cases: Sequence[dict[str, Any]], crop: str) -> None:
    """A warning where data.crop cuts a case's labels, which then are neither trained on nor scored."""
    margin, name = closest_labels(cases, crop)
    if margin < 0:
        log.warning("data.crop=%s cuts labels: %s's reach beyond its %s box, and the labelled voxels outside "
                    "a box are neither trained on nor scored; data.crop=null plans a crop that keeps them",
                    crop, name, crop)


def crop_rule(cases: Sequence[dict[str, Any]]) -> tuple[str, str]:
    """The crop (segnet.data.cropping) to plan, and why: "body" where every case's labels stay at
    least BODY_MARGIN of its box's extent inside the box (unlabelled anatomy around them: a head's
    skull and scalp; a structure that fills the bright part of its scans, which the box would cut
    tight, gets no body crop); else "nonzero" where every case's box holds its labels; else "none"."""
    (body, name), (nonzero, other) = closest_labels(cases, "body"), closest_labels(cases, "nonzero")
    if body >= BODY_MARGIN:
        return "body", (f"every case's labels lie at least {BODY_MARGIN:.0%} of its body box inside it "
                        f"(closest: {name}, {body:.1%})")
    edge = f"{name}'s labels come within {body:.1%} of its body box's edge" if body >= 0 else \
        f"{name}'s labels reach beyond its body box"
    if nonzero >= 0:
        return "nonzero", f"{edge}: the box of its non-zero voxels instead, nnU-Net's"
    return "none", f"{edge}, and {other}'s beyond its non-zero box: the whole volume"


def plan_dataset(
    description: DatasetDescription, fingerprint: dict[str, Any], model: dict[str, Any], budget: Budget,
    samples_per_volume: int, crop: str | None = None,
) -> dict[str, Any]:
    """The plan of a dataset; `crop` (one of segnet.data.cropping's CROPS) where the run sets one,
    else crop_rule's."""
    cases = fingerprint["cases"]  # 3D volumes all: the integrity check names any other
    crop, crop_why = (checked_crop(crop), "data.crop") if crop is not None else crop_rule(cases)
    if crop != "none":
        warn_of_cut_labels(cases, crop)
    spacings = np.array([c["spacing"] for c in cases], np.float64)
    shapes = np.array([c["crops"][crop]["shape"] if crop != "none" else c["shape"] for c in cases], np.float64)
    ras_target = target_spacing(spacings, shapes)
    axis = slicing_axis(ras_target, np.median(shapes, axis=0))
    order = [RAS.index(code) for code in orientation(axis)]  # plan axis -> RAS axis
    spacing = ras_target[order]
    resampled = shapes[:, order] * spacings[:, order] / spacing
    median_shape = np.median(resampled, axis=0)
    dataset = Dataset(description.in_channels, description.num_classes, float(resampled.prod(axis=1).sum()))
    configurations = {}
    # The networks built to count bytes and FLOPs draw on a forked generator: the run's seeded
    # stream, which initializes the network that trains next, owes nothing to what planning counted.
    # A 2D dataset (one slice per case) has no 3D configuration, as nnU-Net plans none for it.
    planned_dims = (2, 3) if median_shape[2] > 1 else (2,)
    why = {2: "slices along the slicing axis, resampled in plane only",
           3: "the volume at the target spacing (nnU-Net's 3d_fullres)"}
    with torch.random.fork_rng(devices=[]):
        for dims in planned_dims:
            configurations[f"{dims}d"] = {
                # 2D: in plane only; 0 keeps each case's own spacing along the slicing axis
                "spacing": [_mm(s) for s in spacing[:2]] + ([_mm(spacing[2])] if dims == 3 else [0.0]),
                **planned_configuration(model, median_shape[:dims], spacing[:dims], budget, dataset,
                                        samples_per_volume),
                "why": why[dims],
            }
        if "3d" in configurations:
            lowres = lowres_configuration(model, median_shape, spacing, configurations["3d"], budget, dataset,
                                          samples_per_volume)
            if lowres is not None:
                configurations["3d_lowres"] = lowres
                configurations[CASCADE] = {
                    **{key: value for key, value in configurations["3d"].items() if key != "why"},
                    "previous_stage": "3d_lowres",
                    "why": "3d at full resolution, its input also 3d_lowres's label map, one channel per "
                           "foreground label (nnU-Net's cascade, planned wherever 3d_lowres is)"}
            else:
                configurations["3d"]["why"] += (
                    f"; its patch covers {coverage(configurations['3d']['patch_size'], median_shape):.1%} of the "
                    f"median image's voxels, so no 3d_lowres (nnU-Net plans one under {LOWRES_COVERAGE:.0%})")
    return {
        "dataset": str(description.root),
        "orientation": orientation(axis),
        "slicing_axis": RAS[axis],
        "target_spacing": [_mm(s) for s in spacing],
        "median_shape": [round(float(s), 1) for s in median_shape],
        "crop": crop,
        "crop_why": crop_why,
        "budget": {"device": budget.device, "memory_gb": budget.memory_gb, "step_gflops": budget.step_gflops},
        "normalization": normalization_plan(description.channel_names, fingerprint["foreground_intensities"],
                                            [c["nonzero_share"] for c in cases]),
        "class_voxels": [int(v) for v in np.sum([c["class_voxels"] for c in cases], axis=0)],
        "configurations": configurations,
        "fingerprint": fingerprint,
    }
