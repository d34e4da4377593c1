"""The label's derived maps in the preprocessed cache (segnet.preprocessing.maps): signed distances
and tubed skeletons as scipy and scikit-image make them, made once (and again only by other code:
maps.py edited, a library upgraded), dropped with a rebuilt case, cropped by the label's box, and
moved with the label by both augmentations."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy
import skimage
import torch
from monai import transforms as T
from scipy import ndimage
from skimage.morphology import skeletonize

from helpers.data import write_decathlon
from segnet.data import derived
from segnet.data.dataset_json import describe_dataset
from segnet.data.derived import code_version, library_version
from segnet.data.device_augmentation import BatchAugmentation
from segnet.data.regions import foreground_units
from segnet.data.transforms import augmentation_transforms
from segnet.preprocessing import maps
from segnet.preprocessing.datasets import CropDataset
from segnet.preprocessing.maps import (
    MAPS_CODE,
    MAPS_LIBRARIES,
    DerivedMaps,
    distance_map,
    signed_distance,
    skeleton_map,
)
from segnet.preprocessing.preprocess import preprocess

GEOMETRY = {"orientation": "RAS", "spacing": [1.5, 1.5, 1.5], "normalization": None}


def square_label(shape=(12, 16, 3)) -> np.ndarray:
    """(1, *shape): class 1 a 4 x 6 block on every slice, class 2 a thick bar, class 3 absent."""
    label = np.zeros((1, *shape), np.uint8)
    label[0, 4:8, 2:8] = 1
    label[0, 2:5, 10:15] = 2
    return label


def test_signed_distances_by_hand_and_as_scipy_makes_them():
    mask = square_label()[0, ..., 0] == 1
    phi = signed_distance(mask, (1.0, 2.0))
    assert phi[4, 0] == pytest.approx(4.0)  # two columns of 2 mm left of the block
    assert phi[2, 4] == pytest.approx(2.0)  # two rows of 1 mm above it
    assert phi[5, 4] == pytest.approx(-2.0)  # two rows inside from the top edge's outer row
    expected = ndimage.distance_transform_edt(~mask, sampling=(1.0, 2.0)) - ndimage.distance_transform_edt(
        mask, sampling=(1.0, 2.0))
    np.testing.assert_allclose(phi, expected)
    assert np.all(signed_distance(np.zeros((3, 4), bool), (1.0, 2.0)) == pytest.approx(math.hypot(3, 8)))


@pytest.mark.parametrize("dims", [2, 3])
def test_the_distance_map_holds_every_foreground_class_per_slice_in_2d(dims):
    label = square_label()
    spacing = [1.0, 2.0, 3.0]
    maps = distance_map(label, [(1,), (2,), (3,)], spacing, dims)
    assert maps.shape == (3, *label.shape[1:]) and maps.dtype == np.float16
    for k in (1, 2):
        if dims == 2:  # within each slice, the slice axis unseen
            expected = np.stack([signed_distance(label[0, ..., d] == k, spacing[:2]) for d in range(3)], axis=-1)
        else:
            expected = signed_distance(label[0] == k, spacing)
        np.testing.assert_allclose(maps[k - 1], expected, rtol=1e-3, atol=1e-2)
    assert (maps[2] > 0).all()  # the absent class is far away everywhere


def test_tubed_skeletons_are_scikit_image_s_thickened_within_the_class():
    label = np.zeros((1, 15, 30, 1), np.uint8)
    label[0, 3:10, 2:28] = 1  # a bar 7 rows thick
    skeleton = skeleton_map(label, [(1,)], dims=2)[0, ..., 0]
    mask = label[0, ..., 0] == 1
    line = skeletonize(mask)
    tube = ndimage.binary_dilation(line, ndimage.generate_binary_structure(2, 1)) & mask
    np.testing.assert_array_equal(skeleton == 1, tube)
    assert (skeleton[6, 5:25] == 1).all() and (skeleton[5, 5:25] == 1).all()  # the centre row and its neighbour
    assert not skeleton[3].any() and not skeleton[:, :2].any()  # nothing on the bar's edge or outside it


def test_overlapping_regions_have_a_channel_each():
    label = square_label()
    label[0, 5:7, 3:6] = 3  # inside class 1's block: the regions {1, 3} and {3} nest
    spacing = [1.0, 1.0, 1.0]
    distance = distance_map(label, [(1, 3), (3,)], spacing, 2)
    np.testing.assert_allclose(distance[0, ..., 0], signed_distance(np.isin(label[0, ..., 0], (1, 3)), spacing[:2]),
                               rtol=1e-3, atol=1e-2)
    skeleton = skeleton_map(label, [(1, 3), (3,)], 2)
    assert skeleton.shape == (2, *label.shape[1:])
    assert (skeleton[0] & skeleton[1]).any()  # a voxel on both regions' skeletons


@pytest.fixture
def cached(tmp_path):
    root = write_decathlon(tmp_path / "Task", cases=2)
    description = describe_dataset(str(root))
    entries = list(preprocess(description, description.labelled, GEOMETRY, str(tmp_path / "cache")).values())
    return description, entries


def of_classes(description, kinds=("distance", "skeleton"), dims=3) -> DerivedMaps:
    return DerivedMaps(tuple(kinds), tuple(foreground_units(description.num_classes, None)), dims)


def test_maps_are_made_once_on_demand_and_dropped_with_a_rebuilt_case(cached):
    description, entries = cached
    maps, entry = of_classes(description), entries[0]
    assert not maps.path(entry, "distance").exists()
    maps.ensure(entries)
    first = maps.path(entry, "distance").stat().st_mtime_ns
    np.testing.assert_allclose(maps.read(entry)["distance"].astype(np.float32),
                               distance_map(entry.label(), maps.units, entry.properties()["spacing"], 3)
                               .astype(np.float32))
    of_classes(description, ["distance"]).ensure(entries)
    assert maps.path(entry, "distance").stat().st_mtime_ns == first
    entry.write(entry.properties()["sources"], entry.image(mmap=False), entry.label(mmap=False), entry.properties())
    assert not maps.path(entry, "distance").exists() and not maps.path(entry, "skeleton").exists()
    with pytest.raises(ValueError, match="unknown derived map"):
        of_classes(description, ["distances"])


def test_maps_of_other_units_are_other_files(cached):
    # dataset.json's labels turned into regions over the same label files: the cached label stays
    # current, but its maps are of other units
    description, entries = cached
    classes = of_classes(description, ["distance"])
    regions = DerivedMaps(("distance",), ((1, 2), (2,)), 3)
    classes.ensure(entries[:1])
    regions.ensure(entries[:1])
    assert classes.path(entries[0], "distance") != regions.path(entries[0], "distance")
    label = entries[0].label()
    expected = signed_distance(np.isin(label[0], (1, 2)), entries[0].properties()["spacing"])
    np.testing.assert_allclose(regions.read(entries[0])["distance"][0].astype(np.float32), expected,
                               rtol=1e-3, atol=2e-2)


def edit_maps_source(monkeypatch):
    read = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes",
                        lambda path: read(path) + (b"# edited" if path == Path(maps.__file__) else b""))


def upgrade(library):
    def upgraded(monkeypatch):
        version = derived.library_version
        monkeypatch.setattr(derived, "library_version", lambda name: "99.0" if name == library else version(name))
    return upgraded


OTHER_CODE = {"maps.py edited": edit_maps_source, "scipy upgraded": upgrade("scipy"),
              "scikit-image upgraded": upgrade("skimage"), "numpy upgraded": upgrade("numpy")}


@pytest.fixture
def forgotten_code_versions(monkeypatch):
    """code_version remembers each code path's version for the process: forgotten around a test
    that changes one (before its patches are undone)."""
    code_version.cache_clear()
    yield
    code_version.cache_clear()


def test_the_maps_key_knows_each_library_s_version():
    assert MAPS_CODE == ("segnet.preprocessing.maps",)
    assert code_version(MAPS_CODE, MAPS_LIBRARIES)["libraries"] == {
        "numpy": np.__version__, "scipy": scipy.__version__, "skimage": skimage.__version__}


def test_a_library_not_imported_is_known_by_its_distribution_s_version(monkeypatch):
    monkeypatch.delitem(sys.modules, "skimage")  # skimage is the import name of scikit-image
    assert library_version("skimage") == skimage.__version__


@pytest.mark.parametrize("change", OTHER_CODE)
def test_maps_made_by_other_code_are_made_again_never_read(cached, monkeypatch, forgotten_code_versions, change):
    description, entries = cached
    entry, derived_maps = entries[0], of_classes(description, ["distance"])
    derived_maps.ensure([entry])
    made, old = derived_maps.path(entry, "distance"), derived_maps.read(entry)["distance"].copy()
    calls = []  # new code, which flips the sign
    monkeypatch.setattr(maps, "distance_map", lambda *args: calls.append(args) or -distance_map(*args))
    derived_maps.ensure([entry])
    assert calls == [] and derived_maps.path(entry, "distance") == made  # the same code's map, read as it is
    OTHER_CODE[change](monkeypatch)
    code_version.cache_clear()
    derived_maps.ensure([entry])
    assert len(calls) == 1 and derived_maps.path(entry, "distance") != made
    np.testing.assert_array_equal(derived_maps.read(entry)["distance"], -old)
    entry.write(entry.properties()["sources"], entry.image(mmap=False), entry.label(mmap=False), entry.properties())
    assert not made.exists() and not derived_maps.path(entry, "distance").exists()  # a rebuilt case drops every code's


def test_crops_carry_the_maps_of_their_box_and_their_spacing(cached):
    description, entries = cached
    derived_maps = of_classes(description)
    derived_maps.ensure(entries)
    crops = CropDataset(entries, [8, 8, 8], samples_per_volume=20, maps=derived_maps)
    crops.set_random_state(0)
    label = entries[0].label()
    phi = derived_maps.read(entries[0])["distance"][0]
    for sample in crops[0]:
        assert sample["distance"].shape == (description.num_classes - 1, 8, 8, 8)
        assert sample["distance"].dtype == torch.float32
        assert torch.equal(sample["spacing"], torch.tensor(entries[0].properties()["spacing"], dtype=torch.float64))
        # the crop's box is where its distances sit in the whole map
        inside = sample["label"][0] == 1
        if inside.any() and (~inside).any():
            assert (sample["distance"][0][inside] <= 0).all() and (sample["distance"][0][~inside] > 0).all()
    assert phi.shape == label.shape[1:]


def moved_consistently(label: torch.Tensor, distance: torch.Tensor, skeleton: torch.Tensor, spacing: float) -> None:
    """After augmentation: skeleton voxels still lie on their class (both by nearest from one grid),
    and the distances' sign still says inside or outside away from the boundary (bilinear there)."""
    on_skeleton = skeleton > 0
    assert torch.equal(skeleton[on_skeleton], label[on_skeleton].to(skeleton.dtype))
    far = distance[0].abs() > 2 * spacing
    assert torch.equal((distance[0] < 0)[far], (label[0] == 1)[far])


def phantom_batch(n: int, size: int, dims: int):
    """n crops of a disc (2D) or ball (3D) of class 1 with its exact maps, of side `size`; off
    centre, so that a flip moves it."""
    grid = np.indices([size] * dims) - np.reshape([0.4 * size] + [0.55 * size] * (dims - 1), (dims,) + (1,) * dims)
    mask = np.sqrt((grid**2).sum(0)) < size / 4
    label = mask[None].astype(np.uint8)
    cube = label[..., None] if dims == 2 else label
    distance = distance_map(cube, [(1,)], [1.0] * 3, dims).astype(np.float32)
    skeleton = skeleton_map(cube, [(1,)], dims)
    if dims == 2:
        distance, skeleton = distance[..., 0], skeleton[..., 0]
    expand = [n] + [1] * (dims + 1)
    return (torch.from_numpy(label).long()[None].repeat(expand), torch.from_numpy(distance)[None].repeat(expand),
            torch.from_numpy(skeleton).float()[None].repeat(expand))


@pytest.mark.parametrize("dims", [2, 3])
def test_device_augmentation_moves_the_maps_with_the_label(dims):
    patch = [24] * dims
    augment = BatchAugmentation(dims, patch, probs={"affine": 1.0})
    label, distance, skeleton = phantom_batch(4, max(augment.in_size), dims)
    label, distance, skeleton = (t[(slice(None), slice(None), *[slice(0, s) for s in augment.in_size])]
                                 for t in (label, distance, skeleton))
    image = distance.clone()
    generator = torch.Generator().manual_seed(3)
    _, out_label, moved = augment(image, label, generator, {"distance": distance, "skeleton": skeleton})
    assert moved["distance"].shape == (4, 1, *patch) and moved["skeleton"].shape == (4, 1, *patch)
    assert not torch.equal(moved["distance"][0], distance[0][(slice(None), *[slice(0, p) for p in patch])])
    for sample in range(4):
        moved_consistently(out_label[sample], moved["distance"][sample], moved["skeleton"][sample], 1.0)


def test_worker_augmentation_moves_the_maps_with_the_label():
    label, distance, skeleton = phantom_batch(1, 32, 2)
    chain = T.Compose(augmentation_transforms(2, maps=["distance", "skeleton"]))
    moved_any = 0
    for seed in range(12):
        chain.set_random_state(seed)
        out = chain({"image": distance[0].clone(), "label": label[0], "distance": distance[0].clone(),
                     "skeleton": skeleton[0].clone()})
        moved_consistently(out["label"], out["distance"], out["skeleton"], 1.0)
        moved_any += not torch.equal(out["label"], label[0])
    assert moved_any >= 6  # flips and rotations did happen
