"""Maps derived from a cached label, for the loss terms that need them (conf/loss/): made once per
case, on demand, into the preprocessed cache beside the label, and read by memory map with the
crops (segnet.preprocessing.datasets), so no training step ever computes them.

- distance (loss.boundary): float16 (K, *spatial), for each foreground class k the signed
  distance in mm to its boundary, by scipy's exact Euclidean distance transform on the plan's
  grid: outside the class the distance to its nearest voxel, inside minus the distance to the
  nearest voxel of another class. A class a case lacks is +diagonal everywhere (the farthest any
  voxel can be), one that fills the case -diagonal.
- skeleton (loss.skeleton_recall): uint8 (1, *spatial), the class number on each foreground
  class's skeleton (scikit-image's skeletonize), thickened by one voxel across its faces within
  the class: Skeleton Recall's tubed skeleton, which survives the nearest-neighbour resampling of
  augmentation better than a one-voxel line.

A 2D plan's maps are per slice (the last axis, as its crops are): distances within the slice and
skeletons of the slice. The ignore label is no class. A case rebuilt in the cache drops its maps
(PreprocessedCase.write), so they always belong to its label; and they lie in a folder named by
the version of the code that makes them (maps_key), so a map that other code made (this module
before an edit, another scipy, scikit-image or numpy) is made again, never read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

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


def maps_key() -> str:
    """The version of the code that makes the maps, which names the folder of their files
    (PreprocessedCase.map_path)."""
    return digest(code_version(MAPS_CODE, MAPS_LIBRARIES))


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


def distance_map(label: np.ndarray, classes: int, spacing: Sequence[float], dims: int) -> np.ndarray:
    """(classes - 1, *spatial) float16 signed distances of the foreground classes of a (1, *spatial) label."""
    return np.stack([per_slice(label[0] == k, dims, lambda m: signed_distance(m, spacing[: m.ndim]))
                     for k in range(1, classes)]).astype(np.float16)


def skeleton_map(label: np.ndarray, classes: int, dims: int) -> np.ndarray:
    """(1, *spatial) uint8: each foreground class's number on its tubed skeleton, 0 elsewhere."""
    out = np.zeros(label.shape, np.uint8)
    for k in range(1, classes):
        out[0][per_slice(label[0] == k, dims, tubed_skeleton)] = k
    return out


def ensure_maps(entries: Sequence[PreprocessedCase], maps: Sequence[str], classes: int, dims: int) -> None:
    """Make the maps an entry lacks, under its case's lock (ranks and folds share a cache), each
    file written whole under a temporary name."""
    unknown = sorted(set(maps) - set(DERIVED_MAPS))
    if unknown:
        raise ValueError(f"unknown derived map(s) {unknown}; the maps are {', '.join(DERIVED_MAPS)}")
    for entry in entries:
        missing = [kind for kind in maps if not entry.map_path(kind, dims).is_file()]
        if not missing:
            continue
        with exclusive(entry.folder / f".{entry.name}.lock"):
            label = entry.label(mmap=False)
            spacing = entry.properties()["spacing"]
            for kind in missing:
                if entry.map_path(kind, dims).is_file():  # another process made it while this one waited
                    continue
                array = (distance_map(label, classes, spacing, dims) if kind == "distance"
                         else skeleton_map(label, classes, dims))
                with atomic_path(entry.map_path(kind, dims)) as temporary:
                    np.save(temporary, array)
