"""The preprocessed cache of a dataset under one plan, as nnU-Net keeps its preprocessed folder.

    <cache_dir>/<dataset>-<hash of its path>/<key of the loading plan and code>/
        loading.json           what the arrays depend on: the plan's orientation, spacing, crop and
                               normalization, and the version of the code that made them
        <case>.image.npy       float32 (channels, *spatial): what evaluation's loading chain gives
        <case>.label.npy       the smallest unsigned integer type that holds the labels, (1, *spatial)
        <case>.foreground.npy  int32 (K, 1 + 3): sampled voxels of each foreground class, (class, x, y, z)
        maps-<key of the maps' units and code>/<case>.<map><2|3>d.npy
                               maps derived from the label for a 2D or 3D plan's loss terms, made on
                               demand (segnet.preprocessing.maps) and read only for the units and
                               by the code that made them
        <case>.json            properties: source files, shape, spacing, affine; written last, so a
                               case is complete exactly when its .json exists and names the sources
                               as they are now

A changed plan, or new code on the loading path (segnet's own, MONAI, nibabel, numpy, torch), gives
another key, so another folder; a changed or added case is found by its sources' stamps
(segnet.data.derived) and done again. Every file is written under a temporary name and renamed,
and a case is built under an exclusive lock on its own lock file: several processes (ranks, SLURM
tasks, folds) starting on an empty cache build each case once and never read half a file.
"""

from __future__ import annotations

import glob
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from segnet.data.dataset_json import Case, case_seed
from segnet.data.derived import case_unchanged, code_version, dataset_folder, digest
from segnet.files import atomic_path, write_json

FORMAT = 1  # bump when what a case's files hold changes: old caches are then never read
DERIVED_MAPS = ("distance", "skeleton")  # what segnet.preprocessing.maps derives from a label
FOREGROUND_SAMPLES = 10_000  # voxels kept per class for foreground-aware crops (nnU-Net's)
# What the arrays are made by: its source and these libraries' versions are in the cache's key.
LOADING_CODE = ("segnet.data.transforms", "segnet.data.image_files", "segnet.data.normalization",
                "segnet.data.cropping", "segnet.preprocessing.preprocess", "segnet.preprocessing.cache")
LOADING_LIBRARIES = ("monai", "nibabel", "numpy", "torch", "PIL", "tifffile", "scipy", "skimage")


def loading_plan(orientation: str, spacing: Sequence[float] | None, normalization: Sequence[dict] | None,
                 crop: str | None = None) -> dict:
    """What the preprocessed arrays depend on, as the cache keys it."""
    return {"format": FORMAT, "orientation": orientation, "spacing": None if spacing is None else list(spacing),
            "normalization": None if normalization is None else [dict(n) for n in normalization],
            "crop": crop or "none", "code": code_version(LOADING_CODE, LOADING_LIBRARIES)}


def cache_folder(root: Path, dataset_root: Path, plan: dict) -> Path:
    return dataset_folder(root, dataset_root) / digest(plan)


def label_dtype(largest: int) -> np.dtype:
    return np.dtype(np.uint8 if largest <= np.iinfo(np.uint8).max else np.uint16)


def sample_foreground(label: np.ndarray, name: str, ignore_label: int | None = None,
                      samples: int = FOREGROUND_SAMPLES) -> np.ndarray:
    """Up to `samples` voxels of each foreground class (seeded by the case name, so reproducible);
    the ignore label is no class."""
    rng = np.random.default_rng(case_seed(name))
    spatial = label[0]
    rows = []
    for value in np.unique(spatial):
        if value == 0 or value == ignore_label:
            continue
        where = np.argwhere(spatial == value)
        if len(where) > samples:
            where = where[rng.choice(len(where), samples, replace=False)]
        rows.append(np.concatenate([np.full((len(where), 1), value), where], axis=1))
    return (np.concatenate(rows) if rows else np.zeros((0, 1 + spatial.ndim))).astype(np.int32)


@dataclass(frozen=True)
class PreprocessedCase:
    """Where one case's arrays lie, and its properties."""

    folder: Path
    name: str

    def path(self, kind: str) -> Path:
        return self.folder / f"{self.name}.{kind}.npy"

    @property
    def properties_path(self) -> Path:
        return self.folder / f"{self.name}.json"

    def properties(self) -> dict[str, Any]:
        return json.loads(self.properties_path.read_text())

    def image(self, mmap: bool = True) -> np.ndarray:
        return np.load(self.path("image"), mmap_mode="r" if mmap else None)

    def label(self, mmap: bool = True) -> np.ndarray:
        return np.load(self.path("label"), mmap_mode="r" if mmap else None)

    def foreground(self) -> np.ndarray:
        return np.load(self.path("foreground"))

    def map_files(self) -> list[Path]:
        """This case's derived maps, whatever code made them."""
        name = glob.escape(self.name)
        return [path for kind in DERIVED_MAPS for path in self.folder.glob(f"maps-*/{name}.{kind}[23]d.npy")]

    def previous_files(self) -> list[Path]:
        """This case's first-stage label maps (segnet.preprocessing.previous_maps) and their stamps."""
        return list(self.folder.glob(f"previous-*/{glob.escape(self.name)}.previous.*"))

    def is_current(self, case: Case) -> bool:
        """Complete, and made from the case's sources as they are now."""
        try:
            return case_unchanged(case, self.properties()["sources"])
        except (OSError, ValueError, KeyError):
            return False

    def write(self, sources: list[dict[str, Any]], image: np.ndarray, label: np.ndarray,
              properties: dict[str, Any], ignore_label: int | None = None) -> None:
        """The arrays, then the properties naming `sources` (their stamps from before they were read);
        maps derived from an earlier label, and first-stage maps cut to the earlier image's box, go first."""
        for path in [*self.map_files(), *self.previous_files()]:
            path.unlink(missing_ok=True)
        foreground = sample_foreground(label, self.name, ignore_label)
        for kind, array in (("image", image), ("label", label), ("foreground", foreground)):
            with atomic_path(self.path(kind)) as temporary:
                np.save(temporary, array)
        write_json(self.properties_path, {**properties, "name": self.name, "sources": sources})
