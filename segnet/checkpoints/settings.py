"""The settings of a trained run that prediction, export and the commands after training read, typed
and frozen (as nnU-Net types its plans): the configuration it trained (2d, 3d, 3d_lowres, ...), its
patch, how its images are loaded (Geometry: the plan's normalization, orientation, spacing and crop),
its classes and channels. A run's data section holds them under these names, as the checkpoint's
hyperparameters save it; from_data reads them from there once, with the defaults of runs that
predate a setting, so that no module reads them by key with a default of its own."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from segnet.data.cropping import checked_crop


def configuration_of(data: Mapping[str, Any]) -> str:
    """The plan's configuration a run's data section trained; a run from before the plan named one
    trained that of its spatial dims."""
    return data.get("configuration") or f"{int(data['spatial_dims'])}d"


@dataclass(frozen=True)
class Geometry:
    """How a run's images are loaded, as its training loaded them."""
    normalization: tuple[dict[str, Any], ...] | None = None  # one entry per channel; None: per-volume z-score
    # axis codes (RAS): each volume reoriented to them first; or a permutation of the stored axes:
    # the stored orientation kept, its axes put in this order last (nnU-Net's, which never reorients)
    orientation: str | tuple[int, ...] = "RAS"
    spacing: tuple[float, ...] | None = None  # None: each image's own grid
    crop: str | None = None  # None: the whole volume (runs from before crops were planned)

    def normalized_channels(self) -> list[str]:
        """The channels' names as the normalization lists them; none where nothing is normalized by plan."""
        return [entry["channel"] for entry in self.normalization or ()]

    def loading(self) -> dict[str, Any]:
        """The loading chain's arguments (segnet.data.transforms.eval_transforms)."""
        return {"normalization": None if self.normalization is None else list(self.normalization),
                "orientation": self.orientation if isinstance(self.orientation, str) else list(self.orientation),
                "spacing": None if self.spacing is None else list(self.spacing),
                "crop": self.crop}


@dataclass(frozen=True)
class RunSettings:
    spatial_dims: int
    configuration: str  # the plan's configuration it trained
    geometry: Geometry
    class_names: tuple[str, ...]  # index = label value, background first
    in_channels: int  # the images' channels (a cascade's network takes more)
    regions: dict[str, Any] | None = None  # dataset.json's regions (segnet.data.regions), None: a class per value
    ignore_label: int | None = None
    patch_size: tuple[int, ...] | None = None  # the training crop; None where the data section has none
    previous_stage: tuple[str, ...] | None = None  # a cascade's first-stage run folders
    fold: int | str | None = None  # its fold of the cross-validation (or "all"); None: generated data
    plan: dict[str, Any] | None = None  # the plan it trained (plans.json but the fingerprint); None: generated data

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> RunSettings:
        """The settings a run's data section holds."""
        dims = int(data["spatial_dims"])
        normalization, spacing, patch, stage = (data.get(key) for key in
                                                 ("normalization", "spacing", "patch_size", "previous_stage"))
        orientation = data.get("orientation", "RAS")
        geometry = Geometry(None if normalization is None else tuple(dict(entry) for entry in normalization),
                            orientation if isinstance(orientation, str) else tuple(orientation),
                            None if spacing is None else tuple(spacing),
                            data.get("crop"))
        return cls(dims, configuration_of(data), geometry, tuple(data["class_names"]),
                   int(data["in_channels"]), data.get("regions"), data.get("ignore_label"),
                   None if patch is None else tuple(patch), None if stage is None else tuple(stage),
                   data.get("fold"), data.get("plan"))

    @property
    def channel_names(self) -> tuple[str, ...] | None:
        """The channels' names as the plan's normalization lists them (dataset.json's); None for
        generated data, which no plan normalizes."""
        return tuple(entry["channel"] for entry in self.plan["normalization"]) if self.plan else None

    def plan_key(self) -> str:
        """Which configuration the run's models make: those loaded and predicted alike (a plan that
        named no crop crops nothing)."""
        loading = self.geometry.loading()
        return json.dumps([self.spatial_dims, loading["normalization"], loading["orientation"], loading["spacing"],
                           checked_crop(self.geometry.crop),
                           None if self.previous_stage is None else list(self.previous_stage)])

    def shared(self) -> dict[str, Any]:
        """What every model of an ensemble (or a package) must agree on: the classes and channels."""
        return {"class_names": list(self.class_names), "regions": self.regions, "in_channels": self.in_channels}
