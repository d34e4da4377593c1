"""A generated brain-tumour task with region-based labels, as BraTS is laid out for nnU-Net v2:
four MRI channels (T1, T1ce, T2, FLAIR: {case}_0000 .. _0003) and nested regions.

Each head is an ellipsoid of tissue with a smooth texture. The tumour is three nested blobs with
wobbly surfaces: label 1 (oedema) around a core whose outer shell is label 3 (enhancing) and whose
inside is label 2 (necrosis). dataset.json declares them as BraTS's regions: whole tumour [1, 2, 3],
tumour core [2, 3] and enhancing tumour 3, with regions_class_order [1, 2, 3]. Every channel sees
another part, as the real sequences do: FLAIR and T2 the oedema, T1ce the enhancing shell, T1 the
necrosis (dark); no channel alone separates all three, so the network has to combine them. Each
case is a function of its seed only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy import ndimage

from segnet.generated.phantom import affine_for, write_case, write_dataset_json

CHANNELS = ("T1", "T1ce", "T2", "FLAIR")
REGIONS = {"background": 0, "whole_tumor": [1, 2, 3], "tumor_core": [2, 3], "enhancing_tumor": 3}
CLASS_ORDER = [1, 2, 3]
SPACING = (1.0, 1.0, 2.0)
# Mean intensity of each tissue per channel: head, oedema, enhancing shell, necrosis.
CONTRAST = np.array([
    [100, 90, 105, 55],   # T1: the necrosis dark
    [100, 95, 170, 60],   # T1ce: the enhancing shell bright
    [100, 150, 140, 165],  # T2: fluid bright
    [100, 160, 130, 120],  # FLAIR: the oedema bright
], np.float32)


def wobbly_distance(shape: tuple[int, ...], centre: np.ndarray, radius: float, state: np.random.RandomState,
                    spacing: tuple[float, ...]) -> np.ndarray:
    """Distance (mm) from `centre` divided by a radius that varies smoothly over the directions:
    below 1 inside a blob with an uneven surface."""
    grid = np.stack(np.meshgrid(*[np.arange(n) * s for n, s in zip(shape, spacing, strict=True)], indexing="ij"))
    offset = grid - centre.reshape(3, 1, 1, 1)
    distance = np.linalg.norm(offset, axis=0)
    wobble = ndimage.gaussian_filter(state.normal(0, 1, shape), 3.0)
    wobble /= np.abs(wobble).max() + 1e-8
    return distance / (radius * (1 + 0.25 * wobble))


def tumour_case(size: int, state: np.random.RandomState) -> tuple[list[np.ndarray], np.ndarray]:
    """(four channels float32, label uint8) of one head, size x size x size / 2 voxels."""
    shape = (size, size, size // 2)
    extent = np.array(shape) * np.array(SPACING)
    head = wobbly_distance(shape, extent / 2, 0.45 * extent.min(), state, SPACING) < 1
    centre = extent / 2 + state.uniform(-0.12, 0.12, 3) * extent
    core_radius = state.uniform(0.12, 0.2) * extent[:2].mean()
    whole = wobbly_distance(shape, centre, core_radius * state.uniform(1.5, 2.0), state, SPACING) < 1
    core = wobbly_distance(shape, centre, core_radius, state, SPACING) < 1
    necrosis = ndimage.binary_erosion(core, iterations=2)
    label = np.zeros(shape, np.uint8)
    label[whole & head] = 1
    label[core & head] = 3
    label[necrosis & head] = 2
    tissue = np.select([label == 1, label == 3, label == 2, head], [1, 2, 3, 0], default=-1)
    channels = []
    for contrast in CONTRAST:
        mean = np.where(tissue >= 0, contrast[np.clip(tissue, 0, 3)], 0.0)
        texture = ndimage.gaussian_filter(state.normal(0, 12, shape), 1.5)
        image = ndimage.gaussian_filter(mean, 0.7) + head * texture + state.normal(0, 8, shape)
        channels.append(np.clip(image, 0, None).astype(np.float32))
    return channels, label


def write_tumour_dataset(root: Path, cases: int = 30, size: int = 48, seed: int = 0) -> Path:
    """An nnU-Net v2 folder of `cases` four-channel heads with BraTS's region-based labels."""
    names = [f"tumour_{i:03d}" for i in range(cases)]
    for i, name in enumerate(names):
        channels, label = tumour_case(size, np.random.RandomState((seed * 1_000_003 + i) % 2**32))
        write_case(root, name, channels, label, affine_for(SPACING, "RAS", label.shape), layout="nnunet")
    return write_dataset_json(root, "nnunet", ("background", "oedema", "necrosis", "enhancing"), CHANNELS, names,
                              labels=REGIONS, regions_class_order=CLASS_ORDER, name="Tumour")
