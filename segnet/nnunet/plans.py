"""An nnU-Net v2 plan as segnet's settings of a trained run (segnet.checkpoints.settings): what
the loading chain needs to feed its network what nnU-Net fed it.

nnU-Net reads a volume's voxels in SimpleITK's axis order (the stored axes reversed), never
reorients it, transposes the axes by the plan's transpose_forward, crops to the non-zero box,
normalizes each channel by its scheme and resamples to the configuration's spacing. segnet's
loading chain does the same with the stored orientation kept: crop, normalization and spacing on
the stored axes (the spacing put into their order), then the axes put into nnU-Net's order
reversed (segnet.data.transforms), so that segnet's last axis is nnU-Net's first: the axis a 2D
configuration slices along. The network (segnet.nnunet.architecture) reverses them back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from segnet.checkpoints.reading import saved_data
from segnet.checkpoints.settings import RunSettings
from segnet.data.dataset_json import nnunet_channels, nnunet_labels
from segnet.data.formats import NATURAL_ENDINGS
from segnet.errors import ConfigError
from segnet.nnunet.folder import ModelFolder, fold_of, folder_of, is_model_checkpoint

# nnU-Net's normalization schemes and segnet's (segnet.data.normalization)
SCHEMES = {"ZScoreNormalization": "zscore", "CTNormalization": "ct", "NoNormalization": "noNorm",
           "RescaleTo01Normalization": "rescale_to_0_1", "RGBTo01Normalization": "rgb_to_0_1"}
CT_STATISTICS = ("mean", "std", "percentile_00_5", "percentile_99_5")
OVERLAP = 0.5  # nnU-Net's tile_step_size: windows half a patch apart


def configuration(plans: dict[str, Any], name: str, where: Path) -> dict[str, Any]:
    """A configuration of the plans with what it inherits (nnU-Net's inherits_from) filled in."""
    own = dict(plans["configurations"][name])
    parent = own.pop("inherits_from", None)
    if parent is None:
        return own
    if parent not in plans["configurations"]:
        raise ConfigError(f"{where}: configuration {name} inherits from {parent}, which the plans lack")
    return {**configuration(plans, parent, where), **own}


def normalization(folder: ModelFolder, config: dict[str, Any], channels: tuple[str, ...]) -> list[dict[str, Any]]:
    """segnet's normalization plan of each channel (segnet.data.normalization) from nnU-Net's
    schemes, use_mask_for_norm and, for CT, the dataset's foreground statistics."""
    entries = []
    for channel, (name, scheme, masked) in enumerate(zip(channels, config["normalization_schemes"],
                                                         config["use_mask_for_norm"], strict=True)):
        if scheme not in SCHEMES:
            raise ConfigError(f"{folder.path / 'plans.json'} normalizes channel {channel} with {scheme}, which segnet "
                              f"does not implement ({', '.join(SCHEMES)})")
        entry: dict[str, Any] = {"channel": name, "scheme": SCHEMES[scheme]}
        if entry["scheme"] == "zscore":
            entry["nonzero"] = bool(masked)
        if entry["scheme"] == "ct":
            statistics = folder.plans["foreground_intensity_properties_per_channel"][str(channel)]
            entry.update({key: float(statistics[key]) for key in CT_STATISTICS})
        entries.append(entry)
    return entries


def loaded_axes(transpose_forward: list[int]) -> list[int]:
    """The stored axes in the order segnet loads them: nnU-Net's (SimpleITK's reversed stored
    axes, transposed) reversed."""
    n = len(transpose_forward)
    return [n - 1 - transpose_forward[n - 1 - j] for j in range(n)]


def stored_spacing(spacing: list[float], transpose_forward: list[int]) -> list[float]:
    """The configuration's spacing (nnU-Net's axis order; a 2D one's lacks the first axis, along
    which it slices, kept as stored: 0) along the stored axes."""
    full = [0.0] * (len(transpose_forward) - len(spacing)) + [float(s) for s in spacing]
    n = len(transpose_forward)
    stored = [0.0] * n
    for axis, value in enumerate(full):
        stored[n - 1 - transpose_forward[axis]] = value
    return stored


def run_data(folder: ModelFolder, fold: int | str) -> dict[str, Any]:
    """The data section of a segnet run that trained what the folder's fold did: classes, channels,
    the loading geometry, the patch (in segnet's axis order), the configuration and fold."""
    dataset, where = folder.dataset, folder.path / "dataset.json"
    ending = dataset.get("file_ending", ".nii.gz")
    if ending in NATURAL_ENDINGS:
        raise ConfigError(f"{where}: its images are {ending} files; segnet reads nnU-Net models of volumes "
                          "(NIfTI, NRRD, MHA) only")
    if "channel_names" not in dataset or "labels" not in dataset:
        raise ConfigError(f"{where} lacks channel_names or labels: it is not an nnU-Net v2 dataset.json")
    config = configuration(folder.plans, folder.configuration, folder.path)
    if config.get("previous_stage"):
        raise ConfigError(f"{folder.path} is a cascade's second stage ({folder.configuration}), which predicts from "
                          "the first stage's label maps: segnet reads nnU-Net's single-stage configurations")
    channels = nnunet_channels(dataset)
    class_names, regions, ignore_label = nnunet_labels(dataset, where)
    transpose = list(folder.plans["transpose_forward"])
    patch = list(config["patch_size"])
    entries = normalization(folder, config, channels)
    return {
        "spatial_dims": len(patch), "configuration": folder.configuration, "fold": fold,
        "class_names": list(class_names), "in_channels": len(channels),
        "regions": None if regions is None else regions.settings(), "ignore_label": ignore_label,
        "normalization": entries, "orientation": loaded_axes(transpose),
        "spacing": stored_spacing(config["spacing"], transpose), "crop": "nonzero",
        "patch_size": patch[::-1],
        "plan": {"normalization": entries},  # the channels' names, where a segnet run's checks read them
    }


def run_inference(data: dict[str, Any]) -> dict[str, Any]:
    """The whole-image settings: windows of the patch, half a patch apart, as nnU-Net predicts."""
    return {"roi_size": list(data["patch_size"]), "sw_batch_size": 1, "overlap": OVERLAP}


def checkpoint_data(path: Path) -> dict[str, Any]:
    """The data section of the run a checkpoint is from: a segnet run's (its checkpoint's), or for
    a checkpoint in a fold of an nnU-Net trained model folder, its plan's and dataset.json's as a
    run's (run_data)."""
    if is_model_checkpoint(Path(path)):
        return run_data(ModelFolder.read(folder_of(Path(path))), fold_of(Path(path)))
    return saved_data(path)


def checkpoint_settings(path: Path) -> RunSettings:
    """The settings of the run a checkpoint is from, a segnet run's or an nnU-Net fold's."""
    return RunSettings.from_data(checkpoint_data(path))
