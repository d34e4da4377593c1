"""The brain-like tissue task (segnet.generated.brain): a cortical ribbon about GREY_MM thick around white
matter, the grey-white boundary blurred by partial volume, labels by the larger tissue share, cases
a function of their seed; and the anisotropic phantom's grids (segnet.generated.phantom)."""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from segnet.data.dataset_json import describe_dataset
from segnet.generated.brain import GREY_MM, T1, TISSUES, Scanner, brain_case, tissue_shares, write_brain_dataset
from segnet.generated.phantom import IN_PLANE_MM, SLICE_MM, anisotropic_grids

SPACING = (1.0, 1.0, 4.0)


def case(seed: int, noise: float = 0.045):
    return brain_case((96, 96, 3), SPACING, np.random.RandomState(seed), scanner=Scanner(noise=noise))


def test_grey_matter_is_a_ribbon_around_white_matter():
    """Both tissues are a large share of the head; the grey is thin (an erosion by its thickness
    leaves little of it, apart from the deep nuclei), and almost all white matter touches grey or
    fluid only through grey: white next to background is rare."""
    _, label = case(1)
    grey, white = label == 1, label == 2
    assert 0.05 < grey.mean() < 0.3 and 0.05 < white.mean() < 0.3
    thick = int(np.ceil(GREY_MM)) + 1
    for k in range(label.shape[2]):
        eroded = ndimage.binary_erosion(grey[..., k], np.ones((thick, thick)))
        assert eroded.sum() < 0.15 * grey[..., k].sum(), k
        white_edge = white[..., k] & ~ndimage.binary_erosion(white[..., k])
        beside = ndimage.binary_dilation(white_edge) & (label[..., k] == 0)
        assert beside.sum() < 0.1 * white_edge.sum(), k


def test_the_grey_white_boundary_is_partial_volume_and_tissues_have_their_contrast():
    """Without noise, voxels on the grey-white boundary take intensities between the two tissues'
    (a mixture, not either one), and deep inside each tissue the intensity is the tissue's, up to
    the bias field."""
    image, label = case(2, noise=0.0)
    grey, white = label == 1, label == 2
    inner_white = ndimage.binary_erosion(white, np.ones((3, 3, 1)))
    boundary = white & ~inner_white & ndimage.binary_dilation(grey, np.ones((3, 3, 1)))
    inner_grey = ndimage.binary_erosion(grey, np.ones((2, 2, 1)))
    w, g = np.median(image[inner_white]), np.median(image[inner_grey])
    assert abs(w / T1["white"] - 1) < 0.2 and abs(g / T1["grey"] - 1) < 0.25
    edge = image[boundary]
    assert np.mean((edge > g + 0.1 * (w - g)) & (edge < w - 0.1 * (w - g))) > 0.3
    # the mixture comes from the anatomy drawn finer than the voxels, not only from the blur
    shares = tissue_shares((96, 96, 3), SPACING, np.random.RandomState(2))
    white_share = shares[TISSUES.index("white")][boundary]
    assert np.mean((white_share > 0) & (white_share < 1)) > 0.5
    assert np.array_equal(label == 2, shares.argmax(axis=0) == TISSUES.index("white"))


def test_a_case_is_a_function_of_its_seed_and_slices_are_one_anatomy():
    first, again, other = case(5), case(5), case(6)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not np.array_equal(first[1], other[1])
    label = first[1]
    # neighbouring slices share most of their labels (the folds move slowly), other heads do not
    same = np.mean(label[..., 0] == label[..., 1])
    assert same > np.mean(label[..., 0] == other[1][..., 1]) and same > 0.85


def test_a_dataset_folder_of_them(tmp_path):
    root = write_brain_dataset(tmp_path / "Brain", cases=2)
    description = describe_dataset(str(root))
    assert [c.name for c in description.labelled] == ["brain_000", "brain_001"]
    assert list(description.class_names) == ["background", "grey_matter", "white_matter"]


def test_anisotropic_grids_are_thick_slices_in_two_orientations():
    grids = anisotropic_grids(40, seed=3)
    assert grids == anisotropic_grids(40, seed=3) and grids != anisotropic_grids(40, seed=4)
    for (x, y, z), axcodes in grids:
        assert x == y and x in IN_PLANE_MM and z in SLICE_MM and axcodes in ("RAS", "LPS")
    assert {axcodes for _, axcodes in grids} == {"RAS", "LPS"}
    assert len({spacing for spacing, _ in grids}) > 4
