"""A generated task hard enough to leave room for a difference between models: thin structures,
low contrast and partial volume, the things an edge layer is meant to help with.

Class 1 is thin tubes (smooth random curves 1 to 2 voxels wide, vessels say), class 2 thin rings
(1.5 to 2.5 voxels wide, a wall around nothing). Both are drawn on a grid SUPERSAMPLE times finer
and averaged down, so that a boundary voxel holds the share of the structure it covers (partial
volume): the label is the class covering at least half the voxel, the image the covered share times
the contrast, blurred by a point-spread function of BLUR voxels and buried in Gaussian noise of
about the contrast's size (contrast / noise 2.5 by default, less after the blur and the partial
volume: the measured foreground-background difference is about 1.5 noise std), on a smooth
background that varies by more than the contrast across the image. Each image is a function of its
seed only. Nothing is downloaded: data=synthetic2d_hard draws images on the fly, and
write_hard_dataset writes a dataset folder of them for the runs that want one (the ablations'
folds, the plan's patch and batch, RandAffined).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy import ndimage

from segnet.generated.phantom import affine_for, write_case, write_dataset_json

SUPERSAMPLE = 4
BLUR = 0.6  # voxels: the point-spread function's standard deviation
CLASS_NAMES = ("background", "tube", "ring")


def _tube(fine: np.ndarray, rng: np.random.RandomState, width: float) -> None:
    """A smooth random curve of this width (fine voxels), added to the fine coverage map."""
    n = fine.shape[0]
    t = np.linspace(0, 1, 8 * n)
    start, end = rng.uniform(0.1, 0.9, 2) * n, rng.uniform(0.1, 0.9, 2) * n
    bend = rng.uniform(-0.25, 0.25, (2, 2)) * n  # two sine modes per coordinate
    path = start[None] + (end - start)[None] * t[:, None]
    for k, amplitude in enumerate(bend, start=1):
        path += amplitude[None] * np.sin(np.pi * k * t)[:, None]
    inside = np.zeros_like(fine, dtype=bool)
    points = np.round(path).astype(int)
    points = points[((points >= 0) & (points < n)).all(axis=1)]  # the curve may leave the image
    inside[points[:, 0], points[:, 1]] = True
    fine[ndimage.distance_transform_edt(~inside) <= width / 2] = 1.0


def _ring(fine: np.ndarray, rng: np.random.RandomState, width: float, radius: float) -> None:
    n = fine.shape[0]
    centre = rng.uniform(radius + width, n - radius - width, 2)
    yy, xx = np.mgrid[:n, :n]
    distance = np.hypot(yy - centre[0], xx - centre[1])
    fine[np.abs(distance - radius) <= width / 2] = 1.0


def hard_shares(
    size: int, state: np.random.RandomState, tubes: int = 3, rings: int = 2, ring_radius: Sequence[float] = (5.0, 14.0),
) -> np.ndarray:
    """(3, size, size): the share of each voxel that tubes (1) and rings (2) cover, drawn on the fine grid
    and averaged down (partial volume); index 0 is unused."""
    fine_size = size * SUPERSAMPLE
    coverage = np.zeros((3, fine_size, fine_size), np.float32)  # per class, on the fine grid
    for _ in range(tubes):
        _tube(coverage[1], state, state.uniform(1.0, 2.0) * SUPERSAMPLE)
    for _ in range(rings):
        _ring(coverage[2], state, state.uniform(1.5, 2.5) * SUPERSAMPLE,
              state.uniform(*ring_radius) * SUPERSAMPLE)
    coverage[1] *= 1 - coverage[2]  # where they cross, the ring
    return coverage.reshape(3, size, SUPERSAMPLE, size, SUPERSAMPLE).mean(axis=(2, 4))


def hard_image_2d(
    size: int, state: np.random.RandomState, tubes: int = 3, rings: int = 2, contrast: float = 1.0,
    noise: float = 0.4, ring_radius: Sequence[float] = (5.0, 14.0),
) -> tuple[np.ndarray, np.ndarray]:
    """(image float32 (size, size), label int64 (size, size): 0 background, 1 tube, 2 ring)."""
    share = hard_shares(size, state, tubes, rings, ring_radius)
    label = np.where(share[2] >= 0.5, 2, np.where(share[1] >= 0.5, 1, 0)).astype(np.int64)
    signal = ndimage.gaussian_filter(contrast * (share[1] + share[2]), BLUR)
    yy, xx = np.mgrid[:size, :size] / size
    a, b, c = state.uniform(-1, 1, 3) * contrast  # a smooth background ramp, larger than the contrast
    background = a * xx + b * yy + c * np.sin(np.pi * xx) * np.sin(np.pi * yy)
    image = background + signal + state.normal(0, noise, (size, size))
    return image.astype(np.float32), label


def write_hard_dataset(
    root: Path, cases: int = 40, size: int = 96, slices: int = 4, seed: int = 0, **options
) -> Path:
    """A Decathlon folder of `cases` volumes of `slices` independent hard_image_2d slices each
    (1 x 1 mm in plane, 3 mm apart: train it in 2D, data.spatial_dims=2)."""
    spacing = (1.0, 1.0, 3.0)
    names = [f"hard_{i:03d}" for i in range(cases)]
    for i, name in enumerate(names):
        state = np.random.RandomState((seed * 1_000_003 + i) % 2**32)
        drawn = [hard_image_2d(size, state, **options) for _ in range(slices)]
        image = np.stack([d[0] for d in drawn], axis=-1)
        label = np.stack([d[1] for d in drawn], axis=-1).astype(np.uint8)
        write_case(root, name, [image], label, affine_for(spacing, "RAS", image.shape))
    return write_dataset_json(root, "decathlon", CLASS_NAMES, ["MRI"], names, name="Hard")
