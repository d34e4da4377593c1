"""Loading a scan on the plan's grid (segnet.data.transforms: Orientationd, then Spacingd), checked
against what does not go through that chain: the geometry each stored grid and plan imply, an
independent resampling of the same file (nibabel.processing, i.e. scipy.ndimage), and the
phantom's anatomy, whose size and place in millimetres are known (segnet.generated.phantom).

The tests that predict through the plan and back (test_planning.py, tests/inference/) build their
expected prediction with the same chain that Invertd undoes, so they would still pass with
Spacingd or Orientationd dropped or given the wrong axis order; these would not."""

from __future__ import annotations

import nibabel as nib
import numpy as np
import pytest
from nibabel.processing import resample_from_to

from helpers.data import OBLIQUE_AFFINE
from segnet.data.transforms import eval_transforms
from segnet.generated.phantom import sample_phantom, save_nifti

RAS = "RAS"
FLIPPED = {"L": "R", "P": "A", "I": "S"}
# Every stored grid the tests use: test_planning.py's MIXED_GRIDS, its sagittal dataset and its
# fingerprint test, scripts/resampling_study.py's 3 mm sagittal slices, the evaluation tests'
# OBLIQUE_AFFINE (0.8 mm along P, 1.2 along S, 2.5 along L) and one coarse isotropic grid.
STORED_GRIDS = [
    ((1.0, 1.0, 1.0), "RAS"), ((0.75, 0.75, 2.0), "LPS"), ((2.0, 0.75, 0.75), "SAR"),
    ((0.75, 0.75, 2.0), "RAS"), ((0.75, 2.0, 0.75), "LSA"),
    ((2.0, 0.75, 0.75), "LPS"), ((2.0, 0.8, 0.8), "RAS"), ((0.75, 2.0, 0.75), "PIL"),
    ((0.5, 0.5, 3.0), "PIL"), ((0.8, 1.2, 2.5), "PSL"), ((1.5, 1.5, 1.5), "ASL"),
]
# Every loading plan they use: the mixed and sagittal datasets' 3D and 2D configurations (a
# spacing of 0 keeps the case's own along the slicing axis), the study's 1 mm plan, the evaluation
# tests' plan for OBLIQUE_AFFINE.
PLANS = [
    ("RAS", (0.75, 0.75, 2.0)), ("RAS", (0.75, 0.75, 0.0)), ("ASR", (0.75, 0.75, 2.0)), ("ASR", (0.75, 0.75, 0.0)),
    ("RAS", (1.0, 1.0, 1.0)), ("ASR", (0.8, 1.2, 2.5)),
]
# The phantom's core: an ellipsoid of these radii (mm, along R, A, S) about OFFSET_MM (world RAS).
RADII_MM = np.array([12.0, 9.0, 7.0])
OFFSET_MM = np.array([3.0, -2.0, 1.5])  # off the grid's centre, so that a flipped axis moves it


def test_the_oblique_grid_is_the_evaluation_tests_one():
    """The list's OBLIQUE entry is the evaluation tests' grid, up to where it starts."""
    _, _, affine = sample_phantom((0.8, 1.2, 2.5), "PSL", distractors=0)
    assert np.allclose(affine[:3, :3], OBLIQUE_AFFINE[:3, :3])


def grid_id(grid) -> str:
    spacing, axcodes = grid
    return f"{axcodes}-{'x'.join(f'{s:g}' for s in spacing)}"


@pytest.fixture(scope="module")
def load(tmp_path_factory):
    """load(grid, plan) -> (stored image, stored label, loaded sample), each grid written once
    and each pair loaded once by eval_transforms(True, ...) with intensities as stored."""
    folder = tmp_path_factory.mktemp("stored_grids")
    loaded = {}

    def load_pair(grid, plan):
        if (grid, plan) not in loaded:
            spacing, axcodes = grid
            image, label, affine = sample_phantom(spacing, axcodes, offset_mm=OFFSET_MM)
            stored = nib.Nifti1Image(image, affine), nib.Nifti1Image(label, affine)
            # uncompressed: quicker to load
            paths = {key: folder / f"{grid_id(grid)}_{key}.nii" for key in ("image", "label")}
            if not paths["image"].exists():
                save_nifti(paths["image"], image, affine)
                save_nifti(paths["label"], label, affine)
            orientation, target = plan
            transform = eval_transforms(True, orientation=orientation, spacing=list(target),
                                        normalization=[{"scheme": "noNorm"}])
            loaded[grid, plan] = (*stored, transform({key: str(path) for key, path in paths.items()}))
        return loaded[grid, plan]

    return load_pair


def expected_grid(stored_affine: np.ndarray, stored_shape, plan) -> tuple[np.ndarray, np.ndarray]:
    """(affine, shape) of the plan's grid over a stored grid, worked out from the two alone: plan
    axis k runs along world direction orientation[k] with the plan's spacing (the stored one where
    the plan says 0), from the stored voxel centre furthest back along it; it spans the stored
    voxel centres (MONAI's convention), so its shape is that span over the spacing, plus one
    (a fraction where the spacing does not divide the span)."""
    orientation, target = plan
    affine, shape = np.eye(4), np.zeros(3)
    for k, code in enumerate(orientation):
        world = RAS.index(FLIPPED.get(code, code))
        sign = 1.0 if code in RAS else -1.0
        stored_axis = int(np.argmax(np.abs(stored_affine[world, :3])))
        stored_spacing = float(np.linalg.norm(stored_affine[:3, stored_axis]))
        last = stored_shape[stored_axis] - 1
        ends = stored_affine[world, 3] + stored_affine[world, stored_axis] * np.array([0, last])
        spacing = target[k] if target[k] > 0 else stored_spacing
        affine[:3, k] = 0.0
        affine[world, k] = sign * spacing
        affine[world, 3] = ends.min() if sign > 0 else ends.max()
        shape[k] = (ends.max() - ends.min()) / spacing + 1
    return affine, shape


@pytest.mark.parametrize("grid", STORED_GRIDS, ids=grid_id)
def test_a_loaded_case_has_the_plans_spacing_orientation_and_shape(load, grid):
    for plan in PLANS:
        stored_image, _, sample = load(grid, plan)
        orientation, target = plan
        affine, shape = expected_grid(stored_image.affine, stored_image.shape, plan)
        for key in ("image", "label"):
            loaded = sample[key]
            where = f"{grid_id(grid)} loaded as {orientation} {target}: {key}"
            loaded_affine = np.asarray(loaded.affine, np.float64)
            spacing = np.linalg.norm(loaded_affine[:3, :3], axis=0)
            planned = np.array(target) > 0  # elsewhere the stored spacing, as expected_grid has it
            assert spacing[planned] == pytest.approx(np.array(target)[planned], abs=1e-5), where
            assert spacing == pytest.approx(np.linalg.norm(affine[:3, :3], axis=0), abs=1e-5), where
            assert "".join(nib.aff2axcodes(loaded_affine)) == orientation, where
            assert np.all(np.abs(np.array(loaded.shape[1:]) - shape) < 1), (where, loaded.shape, shape)
            # and the grid starts where the stored voxels do: the whole affine, its origin included
            assert np.allclose(loaded_affine, affine, atol=1e-4), (where, loaded_affine, affine)


@pytest.mark.parametrize("grid", STORED_GRIDS, ids=grid_id)
def test_loading_matches_an_independent_resampling(load, grid):
    """The same files resampled by nibabel.processing (scipy.ndimage.map_coordinates) onto the grid
    expected_grid works out: the image linearly (border values beyond the last voxel centre), the
    label by nearest neighbour, which may break ties differently at exact half-voxel positions."""
    for plan in PLANS:
        stored_image, stored_label, sample = load(grid, plan)
        affine, _ = expected_grid(stored_image.affine, stored_image.shape, plan)
        shape = tuple(sample["image"].shape[1:])
        where = f"{grid_id(grid)} loaded as {plan}"
        image = np.asarray(resample_from_to(stored_image, (shape, affine), order=1, mode="nearest").dataobj)
        # intensities of 100 to 220; a resampling off by a fraction of a voxel moves edges by tens
        assert np.abs(sample["image"][0].numpy() - image).max() < 0.01, where
        label = np.asarray(resample_from_to(stored_label, (shape, affine), order=0).dataobj)
        assert (sample["label"][0].numpy() == label).mean() > 0.97, where


@pytest.mark.parametrize("grid", STORED_GRIDS, ids=grid_id)
def test_the_anatomy_keeps_its_size_and_place_in_millimetres(load, grid):
    """The phantom's core after loading, measured on the plan's grid (expected_grid: spacing and
    axis directions from the plan, not from the loaded affine), against the ellipsoid it samples:
    its volume (4/3 pi abc), its centroid (OFFSET_MM) and its overlap with the ellipsoid evaluated
    at every loaded voxel's centre. A case left on its stored spacing would be counted with the
    plan's voxel volume (1 mm voxels as 1.125 mm^3 ones: +12 %), and a transposed or flipped axis
    would put the core elsewhere or turn it."""
    volume_mm3 = 4 / 3 * np.pi * np.prod(RADII_MM)
    for plan in PLANS:
        stored_image, _, sample = load(grid, plan)
        affine, _ = expected_grid(stored_image.affine, stored_image.shape, plan)
        core = sample["label"][0].numpy() == 1
        where = f"{grid_id(grid)} loaded as {plan}"
        voxel_mm3 = abs(np.linalg.det(affine[:3, :3]))
        assert core.sum() * voxel_mm3 == pytest.approx(volume_mm3, rel=0.06), where
        centroid = affine[:3, :3] @ np.argwhere(core).mean(axis=0) + affine[:3, 3]
        assert np.abs(centroid - OFFSET_MM).max() < 0.75, (where, centroid)
        voxels = np.stack(np.meshgrid(*[np.arange(n) for n in core.shape], indexing="ij"), -1).reshape(-1, 3)
        world = voxels @ affine[:3, :3].T + affine[:3, 3]
        inside = (((world - OFFSET_MM) / RADII_MM) ** 2).sum(-1).reshape(core.shape) <= 1
        dice = 2 * (inside & core).sum() / (inside.sum() + core.sum())
        assert dice > 0.9, (where, dice)  # nearest neighbour from the stored grid: 0.93 at worst here
