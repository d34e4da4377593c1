"""Maps derived from a cached label, for the loss terms that need them (conf/loss/): made once per
case, on demand, into the preprocessed cache beside the label, and read by memory map with the
crops (segnet.preprocessing.datasets), so no training step ever computes them.

- distance (loss.boundary): float16 (U, *spatial), for each foreground unit the signed distance in
  mm to its boundary, by scipy's exact Euclidean distance transform on the plan's grid: outside
  the unit the distance to its nearest voxel, inside minus the distance to the nearest voxel
  outside it. A unit a case lacks is +diagonal everywhere (the farthest any voxel can be), one
  that fills the case -diagonal.
- skeleton (loss.skeleton_recall): uint8 (U, *spatial), 1 on each foreground unit's skeleton
  (scikit-image's skeletonize), thickened by one voxel across its faces within the unit: Skeleton
  Recall's tubed skeleton, which survives the nearest-neighbour resampling of augmentation better
  than a one-voxel line. A channel per unit, because regions overlap and so do their skeletons.

The foreground units (segnet.data.regions) are what the loss scores: the classes but the
background, or the regions of a region-based dataset. A 2D plan's maps are per slice (the last
axis, as its crops are): distances within the slice and skeletons of the slice. The ignore label
is in no unit. A case rebuilt in the cache drops its maps (PreprocessedCase.write), so they
always belong to its label; and they lie in a folder named by the units and by the version of
the code that makes them (DerivedMaps.key), so a map of other units (dataset.json's classes or
regions changed) or that other code made (this module before an edit, another scipy,
scikit-image or numpy) is made again, never read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import ndimage
from skimage.morphology import skeletonize

from segnet.data.derived import code_version, digest
from segnet.files import atomic_path, exclusive
from segnet.preprocessing.cache import DERIVED_MAPS, PreprocessedCase

# What makes the maps from a cached label (the label itself is the cache folder's, keyed by the
# loading code): this module's source and these libraries' versions. scikit-image is imported
# above, so its version is known by its import name.
MAPS_CODE = ("segnet.preprocessing.maps",)
MAPS_LIBRARIES = ("numpy", "scipy", "skimage")


def signed_distance(mask: np.ndarray, spacing: Sequence[float]) -> np.ndarray:
    """float32 signed distance (mm) to the boundary of a boolean mask: + outside, - inside."""
    if not mask.any() or mask.all():
        diagonal = math.hypot(*(n * s for n, s in zip(mask.shape, spacing, strict=True)))
        return np.full(mask.shape, diagonal if not mask.any() else -diagonal, np.float32)
    outside = ndimage.distance_transform_edt(~mask, sampling=spacing)
    inside = ndimage.distance_transform_edt(mask, sampling=spacing)
    return (outside - inside).astype(np.float32)


def tubed_skeleton(mask: np.ndarray) -> np.ndarray:
    """The mask's skeleton grown by one voxel across its faces, within the mask."""
    skeleton = skeletonize(mask)
    return ndimage.binary_dilation(skeleton, ndimage.generate_binary_structure(mask.ndim, 1)) & mask


def per_slice(spatial: np.ndarray, dims: int, make) -> np.ndarray:
    """make(array) on the whole (D, H, W)-like volume in 3D, or on each slice of its last axis in 2D."""
    if dims == 3:
        return make(spatial)
    return np.stack([make(spatial[..., d]) for d in range(spatial.shape[-1])], axis=-1)


def unit_masks(label: np.ndarray, units: Sequence[Sequence[int]]) -> list[np.ndarray]:
    """The boolean mask of each foreground unit (its label values) in a (1, *spatial) label."""
    return [np.isin(label[0], unit) for unit in units]


def distance_map(label: np.ndarray, units: Sequence[Sequence[int]], spacing: Sequence[float],
                 dims: int) -> np.ndarray:
    """(units, *spatial) float16 signed distances of the foreground units of a (1, *spatial) label."""
    return np.stack([per_slice(mask, dims, lambda m: signed_distance(m, spacing[: m.ndim]))
                     for mask in unit_masks(label, units)]).astype(np.float16)


def skeleton_map(label: np.ndarray, units: Sequence[Sequence[int]], dims: int) -> np.ndarray:
    """(units, *spatial) uint8: 1 on each foreground unit's tubed skeleton, 0 elsewhere."""
    return np.stack([per_slice(mask, dims, tubed_skeleton) for mask in unit_masks(label, units)]).astype(np.uint8)


@dataclass(frozen=True)
class DerivedMaps:
    """The label's maps a run's loss reads: their kinds, of which foreground units (one tuple of
    label values each), on a 2D or 3D plan's grid."""
    kinds: tuple[str, ...]
    units: tuple[tuple[int, ...], ...]
    dims: int

    def __post_init__(self):
        unknown = sorted(set(self.kinds) - set(DERIVED_MAPS))
        if unknown:
            raise ValueError(f"unknown derived map(s) {unknown}; the maps are {', '.join(DERIVED_MAPS)}")

    def key(self) -> str:
        """What the maps are of and what makes them, which names the folder of their files."""
        return digest({**code_version(MAPS_CODE, MAPS_LIBRARIES), "units": [list(unit) for unit in self.units]})

    def path(self, entry: PreprocessedCase, kind: str) -> Path:
        return entry.folder / f"maps-{self.key()}" / f"{entry.name}.{kind}{self.dims}d.npy"

    def read(self, entry: PreprocessedCase) -> dict[str, np.ndarray]:
        """{kind: its (units, *spatial) map of the entry}, memory-mapped."""
        return {kind: np.load(self.path(entry, kind), mmap_mode="r") for kind in self.kinds}

    def ensure(self, entries: Sequence[PreprocessedCase]) -> None:
        """Make the maps an entry lacks, under its case's lock (ranks and folds share a cache), each
        file written whole under a temporary name."""
        for entry in entries:
            if all(self.path(entry, kind).is_file() for kind in self.kinds):
                continue
            with exclusive(entry.folder / f".{entry.name}.lock"):
                label = entry.label(mmap=False)
                spacing = entry.properties()["spacing"]
                for kind in self.kinds:
                    if self.path(entry, kind).is_file():  # made already, or by another process while this one waited
                        continue
                    array = (distance_map(label, self.units, spacing, self.dims) if kind == "distance"
                             else skeleton_map(label, self.units, self.dims))
                    with atomic_path(self.path(entry, kind)) as temporary:
                        np.save(temporary, array)
