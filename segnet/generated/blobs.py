"""Tiny 3D cases of a bright and a dark blob in noise, in nnU-Net v2's raw layout: small enough for
nnU-Net's own planner and trainer on a CPU in seconds (tests/helpers/nnunet_model.py), and, with
another contrast, the related target task of a transfer experiment (scripts/nnunet_transfer.py).

Each case is 20 x 28 x 24 voxels at 2 x 1 x 1 mm (2 mm along the first stored axis, so that
nnU-Net's plan transposes the axes) with a zero border around the anatomy (nnU-Net crops to the
non-zero box)."""

from __future__ import annotations

import json
from pathlib import Path

import nibabel as nib
import numpy as np

SPACING = (2.0, 1.0, 1.0)  # as stored (nibabel's axis order)
SHAPE = (20, 28, 24)
CONTRAST = (60.0, -50.0)  # the bright and the dark blob's offsets from the background, noise 10
LABELS = {"background": 0, "bright": 1, "dark": 2}


def write_blob_case(image_path: Path, label_path: Path | None, seed: int,
                    contrast: tuple[float, float] = CONTRAST) -> None:
    rng = np.random.default_rng(seed)
    grid = np.stack(np.meshgrid(*[np.arange(s) * d for s, d in zip(SHAPE, SPACING, strict=True)], indexing="ij"))
    label = np.zeros(SHAPE, np.uint8)
    for value, radius in ((1, 6.0), (2, 5.0)):
        centre = np.array([rng.uniform(12, 28), rng.uniform(8, 20), rng.uniform(8, 16)])
        label[np.linalg.norm(grid - centre[:, None, None, None], axis=0) < radius] = value
    image = rng.normal(100, 10, SHAPE) + contrast[0] * (label == 1) + contrast[1] * (label == 2)
    image[:2], image[:, -3:] = 0, 0
    affine = np.diag([*SPACING, 1.0])
    nib.save(nib.Nifti1Image(image.astype(np.float32), affine), image_path)
    if label_path is not None:
        label[:2], label[:, -3:] = 0, 0
        nib.save(nib.Nifti1Image(label, affine), label_path)


def write_blob_dataset(root: Path, cases: int, seed: int = 0, contrast: tuple[float, float] = CONTRAST) -> Path:
    """root/{imagesTr,labelsTr,dataset.json} with cases case<i> (seeds seed + i), one MRI channel."""
    (root / "imagesTr").mkdir(parents=True)
    (root / "labelsTr").mkdir()
    for i in range(cases):
        write_blob_case(root / "imagesTr" / f"case{i}_0000.nii.gz", root / "labelsTr" / f"case{i}.nii.gz", seed + i,
                        contrast)
    (root / "dataset.json").write_text(json.dumps({"channel_names": {"0": "MRI"}, "labels": LABELS,
                                                   "numTraining": cases, "file_ending": ".nii.gz"}))
    return root
