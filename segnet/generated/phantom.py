"""Generated scans of one anatomy at any voxel spacing and storage orientation.

A phantom is defined in millimetres of world (RAS) space, an ellipsoid "core" inside a "shell",
among small unlabelled spheres as bright as the core (vessels, say: only their size in mm tells
them apart), and each case samples it on its own grid: spacing, axis order and flips as a scanner would
store them (RAS, LPS, permuted axes). The same anatomy then looks different only because of
its geometry, which is what planning, resampling and prediction must undo. Tests and
scripts/resampling_study.py write dataset folders of them; nothing is downloaded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import nibabel as nib
import numpy as np

FIELD_OF_VIEW_MM = 48.0
DISTRACTOR_RADIUS_MM = 3.0
WORLD = "RAS"
OPPOSITE = {"R": "L", "A": "P", "S": "I", "L": "R", "P": "A", "I": "S"}


def affine_for(spacing: Sequence[float], axcodes: str, shape: Sequence[int]) -> np.ndarray:
    """The affine of a grid whose voxel axis i runs along world direction axcodes[i] with
    spacing[i] mm, centred on the world origin."""
    affine = np.eye(4)
    for axis, code in enumerate(axcodes):
        world = WORLD.index(code) if code in WORLD else WORLD.index(OPPOSITE[code])
        sign = 1.0 if code in WORLD else -1.0
        affine[:3, axis] = 0.0
        affine[world, axis] = sign * spacing[axis]
    affine[:3, 3] = -affine[:3, :3] @ ((np.asarray(shape) - 1) / 2)
    return affine


def sample_phantom(
    spacing: Sequence[float], axcodes: str = "RAS", radii_mm: Sequence[float] = (12.0, 9.0, 7.0), seed: int = 0,
    offset_mm: Sequence[float] = (0.0, 0.0, 0.0), noise: float = 8.0, distractors: int = 8,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(image float32, label uint8, affine) of the phantom on a grid of this spacing and axis
    order covering FIELD_OF_VIEW_MM: label 1 inside the ellipsoid, 2 in a 3 mm shell around it,
    and `distractors` unlabelled spheres of DISTRACTOR_RADIUS_MM outside both."""
    shape = [int(round(FIELD_OF_VIEW_MM / s)) for s in spacing]
    affine = affine_for(spacing, axcodes, shape)
    voxels = np.stack(np.meshgrid(*[np.arange(n) for n in shape], indexing="ij"), -1).reshape(-1, 3)
    world = voxels @ affine[:3, :3].T + affine[:3, 3] - np.asarray(offset_mm)
    radius = np.sqrt(((world / np.asarray(radii_mm)) ** 2).sum(-1)).reshape(shape)  # 1 on the surface
    label = np.zeros(shape, np.uint8)
    label[radius <= 1 + 3.0 / min(radii_mm)] = 2
    label[radius <= 1] = 1
    rng = np.random.default_rng(seed)
    bright = label == 1
    half = FIELD_OF_VIEW_MM / 2 - DISTRACTOR_RADIUS_MM
    for centre in rng.uniform(-half, half, (distractors, 3)):
        if np.all(np.abs(centre) < np.asarray(radii_mm) + 3 + DISTRACTOR_RADIUS_MM):
            continue  # it would touch the organ
        bright |= (np.linalg.norm(world - centre, axis=-1) <= DISTRACTOR_RADIUS_MM).reshape(shape) & (label == 0)
    image = 100 + 80 * bright + 40 * (label == 2) + rng.normal(0, noise, shape)
    return image.astype(np.float32), label, affine


def write_phantom_dataset(
    root: Path, grids: Sequence[tuple[Sequence[float], str]], first_seed: int = 0, modalities: Sequence[str] = ("MRI",)
) -> Path:
    """A dataset folder with one case per (spacing, axcodes) grid; the anatomy varies a little
    from case to case (size and position), as patients do. One modality: a Decathlon folder;
    several: an nnU-Net v2 folder ({case}_0000, {case}_0001, ...), channel c showing the anatomy
    with another contrast (CT channels in Hounsfield-like units)."""
    layout = "decathlon" if len(modalities) == 1 else "nnunet"
    names = [f"phantom_{i:03d}" for i in range(len(grids))]
    for i, (spacing, axcodes) in enumerate(grids):
        rng = np.random.default_rng(first_seed + i)
        radii = rng.uniform(0.85, 1.15) * np.array([12.0, 9.0, 7.0])
        image, label, affine = sample_phantom(spacing, axcodes, radii, first_seed + i, rng.uniform(-4, 4, 3))
        if layout == "decathlon":
            channels = [image]
        else:
            channels = [(image * 5 - 600 if modality.lower() == "ct" else image * (1 + c) - 30 * c).astype(np.float32)
                        for c, modality in enumerate(modalities)]
        write_case(root, names[i], channels, label, affine, layout)
    return write_dataset_json(root, layout, ("background", "core", "shell"), modalities, names, name="Phantom")


IN_PLANE_MM = (0.7, 0.75, 0.8, 0.9)
SLICE_MM = (2.0, 2.5, 3.0)


def anisotropic_grids(cases: int, seed: int = 0) -> list[tuple[tuple[float, float, float], str]]:
    """Grids of a thick-slice acquisition, as clinical MRI stores them: in-plane spacing from
    IN_PLANE_MM, slices SLICE_MM apart, RAS or LPS storage; one per case, drawn from the seed."""
    rng = np.random.default_rng(seed)
    grids = []
    for _ in range(cases):
        in_plane, thickness = float(rng.choice(IN_PLANE_MM)), float(rng.choice(SLICE_MM))
        grids.append(((in_plane, in_plane, thickness), str(rng.choice(["RAS", "LPS"]))))
    return grids


def save_nifti(path: Path, array: np.ndarray, affine: np.ndarray | None = None) -> None:
    """`array` as a NIfTI file on the grid `affine` (the identity if None), its folder made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    nib.save(nib.Nifti1Image(array, np.eye(4) if affine is None else affine), str(path))


def training_entry(name: str) -> dict[str, str]:
    """A case's entry in a Decathlon dataset.json's "training" (or "validation") list."""
    return {"image": f"./imagesTr/{name}.nii.gz", "label": f"./labelsTr/{name}.nii.gz"}


def write_case(
    root: Path, name: str, channels: Sequence[np.ndarray], label: np.ndarray, affine: np.ndarray | None = None,
    layout: str = "decathlon",
) -> None:
    """One training case: labelsTr/{name}.nii.gz and its image in imagesTr, one file named
    {name} (Decathlon, one channel) or one file per channel {name}_0000, {name}_0001, ... (nnU-Net v2)."""
    save_nifti(root / "labelsTr" / f"{name}.nii.gz", label, affine)
    if layout == "decathlon":
        (image,) = channels
        save_nifti(root / "imagesTr" / f"{name}.nii.gz", image, affine)
        return
    for c, image in enumerate(channels):
        save_nifti(root / "imagesTr" / f"{name}_{c:04d}.nii.gz", image, affine)


def write_dataset_json(
    root: Path, layout: str, class_names: Sequence[str], channel_names: Sequence[str], cases: Sequence[str],
    **extra,
) -> Path:
    """root/dataset.json for the training cases written by write_case, in `layout` ("decathlon":
    modality, labels by value, a "training" list; "nnunet": channel_names, labels by name,
    file_ending), with `extra` entries (name, validation, test, ...) added or replacing these."""
    channels = {str(c): m for c, m in enumerate(channel_names)}
    if layout == "nnunet":
        spec = {"channel_names": channels, "labels": {n: v for v, n in enumerate(class_names)},
                "numTraining": len(cases), "file_ending": ".nii.gz"}
    else:
        spec = {"modality": channels, "labels": {str(v): n for v, n in enumerate(class_names)},
                "numTraining": len(cases), "training": [training_entry(name) for name in cases]}
    (root / "dataset.json").write_text(json.dumps({**spec, **extra}, indent=2))
    return root
