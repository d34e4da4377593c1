"""Tiny Decathlon and nnU-Net datasets of spheres for tests; the files and dataset.json are
written by segnet.generated.phantom, as its phantom datasets are."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from segnet.generated.phantom import save_nifti, training_entry, write_case, write_dataset_json

CLASS_NAMES = ("background", "core", "shell")


def sphere_case(shape=(20, 24, 16), center=None, radius=5, seed=0) -> tuple[np.ndarray, np.ndarray]:
    """A noisy volume with a bright sphere (label 1) and a darker shell around it (label 2)."""
    rng = np.random.default_rng(seed)
    grid = np.stack(np.meshgrid(*[np.arange(s) for s in shape], indexing="ij"), -1)
    center = np.array(center if center is not None else [s // 2 for s in shape])
    distance = np.linalg.norm(grid - center, axis=-1)
    label = np.zeros(shape, np.uint8)
    label[distance <= radius + 2] = 2
    label[distance <= radius] = 1
    image = (100 + 80 * (label == 1) + 40 * (label == 2) + rng.normal(0, 5, shape)).astype(np.float32)
    return image, label


# Anisotropic voxels (2.5 x 0.8 x 1.2 mm) with permuted, flipped axes: far from RAS.
OBLIQUE_AFFINE = np.array([[0, 0, -2.5, 10], [-0.8, 0, 0, 5], [0, 1.2, 0, -3], [0, 0, 0, 1.0]])


def head_in_noise(field: tuple[int, int] = (192, 192), slices: int = 2, seed: int = 5,
                  noise: float = 0.04) -> tuple[np.ndarray, np.ndarray]:
    """A T1 head (1 x 1 x 4 mm, segnet.generated.heads' anatomy) anywhere in a field of view of
    `field` voxels, its air the noise of a magnitude image of `noise` (of the white matter's
    signal); (image, label)."""
    from segnet.generated.brain import Scanner, render, tissue_shares
    from segnet.generated.heads import HEAD_VOXELS, SPACING, TOP_MM, embed

    state = np.random.RandomState(seed)
    shares = tissue_shares((HEAD_VOXELS, HEAD_VOXELS, slices), SPACING, state, top_mm=TOP_MM)
    scanner = Scanner(gain=800.0, gamma=1.2, bias=0.2, noise=noise, magnitude=True)
    return render(embed(shares, field, np.random.RandomState(seed)), state, scanner)


def other_scanner(image: np.ndarray, seed: int) -> np.ndarray:
    """The same anatomy from another scanner: other gain and offset, a smooth bias field along
    the first axis, and more noise."""
    rng = np.random.default_rng(1000 + seed)
    bias = np.linspace(0.9, 1.12, image.shape[0])[:, None, None]  # +-10 %, typical of MRI
    return (2.5 * image * bias - 40 + rng.normal(0, 12, image.shape)).astype(np.float32)


def write_decathlon(
    root: Path, cases: int = 4, validation: bool = False, with_test: bool = False, affine: np.ndarray | None = None,
    first_seed: int = 0, scanner=None,
) -> Path:
    """A tiny Task folder: dataset.json, imagesTr, labelsTr (and imagesTs); `scanner` maps each
    image (and its seed) to how another scanner would have recorded it."""
    names = [f"case_{i:03d}" for i in range(cases)]
    for i, name in enumerate(names):
        image, label = sphere_case(seed=first_seed + i, radius=4 + i % 2)
        if scanner is not None:
            image = scanner(image, first_seed + i)
        write_case(root, name, [image], label, affine)
    extra = {"name": "Tiny", "test": []}
    if validation:
        extra.update(validation=[training_entry(names[0])], training=[training_entry(n) for n in names[1:]])
    if with_test:
        image, _ = sphere_case(seed=99)
        save_nifti(root / "imagesTs" / "case_900.nii.gz", image, affine)
        extra["test"] = ["./imagesTs/case_900.nii.gz"]
    return write_dataset_json(root, "decathlon", CLASS_NAMES, ["MRI"], names, **extra)


def write_nnunet(root: Path, cases: int = 3) -> Path:
    """A tiny nnU-Net v2 raw dataset: imagesTr/{case}_0000.nii.gz, labelsTr/{case}.nii.gz."""
    names = [f"tiny_{i:03d}" for i in range(cases)]
    for i, name in enumerate(names):
        image, label = sphere_case(seed=10 + i)
        write_case(root, name, [image], label, layout="nnunet")
    return write_dataset_json(root, "nnunet", CLASS_NAMES, ["T2"], names)
