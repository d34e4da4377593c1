"""The preprocessed cache: built once and reused, redone for a changed plan or case, one correct
cache from concurrent builders, crops read from memory maps, and the same arrays (so the same
validation) as loading the sources."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time

import monai
import nibabel as nib
import numpy as np
import pytest
import torch

from helpers.data import write_decathlon, write_nnunet
from segnet.data import derived
from segnet.data.dataset_json import describe_dataset
from segnet.data.transforms import case_dicts, eval_transforms
from segnet.preprocessing import cache as preprocessing_cache
from segnet.preprocessing import preprocess as preprocess_module
from segnet.preprocessing.datasets import CropDataset, VolumeDataset, patch_start, read_box
from segnet.preprocessing.preprocess import preprocess

GEOMETRY = {"orientation": "RAS", "spacing": [1.5, 1.5, 1.5], "normalization": None}


@pytest.fixture
def dataset(tmp_path):
    root = write_decathlon(tmp_path / "Task", cases=3)
    return describe_dataset(str(root)), tmp_path / "cache"


def built_cases(monkeypatch) -> list[str]:
    """The names of the cases build_case writes from now on."""
    built = []
    original = preprocess_module.build_case

    def counting(case, entry, *args):
        if not entry.is_current(case):
            built.append(case.name)
        original(case, entry, *args)

    monkeypatch.setattr(preprocess_module, "build_case", counting)
    return built


def test_the_cache_holds_what_loading_the_sources_gives(dataset):
    description, cache = dataset
    entries = preprocess(description, description.labelled, GEOMETRY, str(cache))
    for case in description.labelled:
        loaded = eval_transforms(True, **GEOMETRY)(case_dicts([case])[0])
        entry = entries[case.name]
        assert np.array_equal(entry.image(), loaded["image"].numpy())
        assert entry.image().dtype == np.float32 and entry.label().dtype == np.uint8  # labels 0..2
        assert np.array_equal(entry.label(), loaded["label"].numpy())
        properties = entry.properties()
        assert properties["spacing"] == [1.5, 1.5, 1.5]
        assert properties["shape"] == list(loaded["image"].shape[1:])
        assert np.allclose(properties["original_affine"], loaded["image"].meta["original_affine"])
        foreground = entry.foreground()
        assert set(foreground[:, 0]) == {1, 2}
        assert (entry.label()[0][tuple(foreground[:, 1:].T)] == foreground[:, 0]).all()  # each is where it says


def test_validation_volumes_equal_the_old_path(dataset):
    description, cache = dataset
    entries = preprocess(description, description.labelled, GEOMETRY, str(cache))
    volumes = VolumeDataset([entries[c.name] for c in description.labelled])
    for index, case in enumerate(description.labelled):
        loaded = eval_transforms(True, **GEOMETRY)(case_dicts([case])[0])
        item = volumes[index]
        assert item["name"] == case.name and item["label"].dtype == torch.int64
        assert torch.equal(item["image"], loaded["image"].as_tensor())
        assert torch.equal(item["label"], loaded["label"].as_tensor())
        # validation measures HD95 and NSD in these mm: the old path's MetaTensor spacing
        assert item["spacing"].tolist() == pytest.approx(loaded["image"].pixdim.tolist())


def test_built_once_then_reused(dataset, monkeypatch):
    description, cache = dataset
    built = built_cases(monkeypatch)
    first = preprocess(description, description.labelled, GEOMETRY, str(cache))
    stamps = {name: os.stat(e.path("image")).st_mtime_ns for name, e in first.items()}
    again = preprocess(description, description.labelled, GEOMETRY, str(cache))
    assert sorted(built) == sorted(c.name for c in description.labelled)  # each once, in the first call
    assert {name: os.stat(e.path("image")).st_mtime_ns for name, e in again.items()} == stamps


def test_a_changed_plan_or_case_is_done_again(dataset, monkeypatch):
    description, cache = dataset
    first = preprocess(description, description.labelled, GEOMETRY, str(cache))
    built = built_cases(monkeypatch)
    other = preprocess(description, description.labelled, {**GEOMETRY, "spacing": [2.0, 2.0, 2.0]}, str(cache))
    assert len(built) == 3 and next(iter(other.values())).folder != next(iter(first.values())).folder
    built.clear()
    cropped = preprocess(description, description.labelled, {**GEOMETRY, "crop": "nonzero"}, str(cache))
    assert len(built) == 3 and next(iter(cropped.values())).folder != next(iter(first.values())).folder
    built.clear()
    changed = description.labelled[1]
    # a cascade's first-stage maps, cut to the image's box: the changed case's go with its old arrays
    previous = {c.name: first[c.name].folder / "previous-x" / f"{c.name}.previous.npy" for c in description.labelled}
    for path in previous.values():
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"")
    time.sleep(0.01)  # a new modification time even on coarse clocks
    image = np.asarray(nib.load(changed.images[0]).dataobj)
    nib.save(nib.Nifti1Image(image * 2, np.eye(4)), changed.images[0])
    redone = preprocess(description, description.labelled, GEOMETRY, str(cache))
    assert built == [changed.name]
    assert [name for name, path in previous.items() if not path.exists()] == [changed.name]
    assert redone[changed.name].properties()["sources"][0]["size"] == os.stat(changed.images[0]).st_size


def test_concurrent_builders_make_one_correct_cache(dataset, tmp_path):
    description, cache = dataset
    script = (
        "import sys; from segnet.data.dataset_json import describe_dataset; "
        "from segnet.preprocessing.preprocess import preprocess; "
        "d = describe_dataset(sys.argv[1]); "
        f"preprocess(d, d.labelled, {GEOMETRY!r}, sys.argv[2], workers=1)"
    )
    builders = [subprocess.Popen([sys.executable, "-c", script, str(description.root), str(cache)],
                                 stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for builder in builders:
        assert builder.wait(timeout=300) == 0, builder.stderr.read()[-2000:]
    entries = preprocess(description, description.labelled, GEOMETRY, str(tmp_path / "alone"))
    folder = next(iter(preprocess(description, description.labelled, GEOMETRY, str(cache)).values())).folder
    assert not list(folder.glob(".*.tmp*"))
    for name, entry in entries.items():
        shared = entry.__class__(folder, name)
        assert np.array_equal(shared.image(), entry.image()) and np.array_equal(shared.label(), entry.label())


def test_a_crop_reads_only_its_box_and_zeros_outside():
    array = np.arange(2 * 5 * 6 * 7, dtype=np.float32).reshape(2, 5, 6, 7)
    box = read_box(array, [-2, 1, 3], [4, 3, 6])
    assert box.shape == (2, 4, 3, 6)
    assert (box[:, :2] == 0).all() and (box[:, :, :, 4:] == 0).all()
    assert np.array_equal(box[:, 2:, :, :4], array[:, :2, 1:4, 3:7])
    assert patch_start(10, 4, 0) == 0 and patch_start(10, 4, 9) == 6 and patch_start(3, 7, 1) == -2


def test_crops_come_from_memory_maps_and_favour_foreground(dataset):
    description, cache = dataset
    entries = list(preprocess(description, description.labelled, GEOMETRY, str(cache)).values())
    assert isinstance(entries[0].image(), np.memmap)
    torch.manual_seed(0)
    crops = CropDataset(entries, [8, 8, 8], samples_per_volume=200)
    samples = [s for i in range(len(crops)) for s in crops[i]]
    assert all(s["image"].shape == (1, 8, 8, 8) and s["label"].shape == (1, 8, 8, 8) for s in samples)
    with_foreground = np.mean([bool((s["label"] > 0).any()) for s in samples])
    background_share = np.mean([(e.label() == 0).mean() for e in entries])
    assert with_foreground >= 2 / 3 - 0.05 and with_foreground > 1 - background_share  # more than chance
    margin = CropDataset(entries, [8, 8, 1], samples_per_volume=1, margin=[3, 3, 0], squeeze_last=True)[0][0]
    assert margin["image"].shape == (1, 14, 14)


def stored_gzip(path: str, image: nib.Nifti1Image) -> None:
    """A NIfTI gzip of stored (uncompressed) blocks: its size is the same for any voxel values."""
    with gzip.GzipFile(path, "wb", compresslevel=0, mtime=0) as f:
        f.write(image.to_bytes())


def test_a_source_changed_behind_its_size_and_time_is_done_again(dataset, monkeypatch):
    # labels 1 and 2 swapped in place, the size and modification time as before (cp -p, tar, rsync -t)
    monkeypatch.setattr(derived, "RACY_NS", 0)  # the stamps alone, no content hash
    description, cache = dataset
    case = description.labelled[0]
    stored = nib.load(case.label)
    label = np.asarray(stored.dataobj)
    stored_gzip(case.label, nib.Nifti1Image(label, stored.affine))
    before = os.stat(case.label)
    first = preprocess(description, description.labelled, GEOMETRY, str(cache))[case.name].label().copy()
    swapped = np.choose(label, [0, 2, 1]).astype(label.dtype)  # classes 0, 1, 2
    stored_gzip(case.label, nib.Nifti1Image(swapped, stored.affine))
    os.utime(case.label, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (os.stat(case.label).st_size, os.stat(case.label).st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    built = built_cases(monkeypatch)
    again = preprocess(description, description.labelled, GEOMETRY, str(cache))[case.name].label()
    assert built == [case.name]
    assert np.array_equal(again == 1, first == 2) and np.array_equal(again == 2, first == 1)


def test_a_file_changed_within_its_clock_tick_is_told_by_its_content(tmp_path):
    path = tmp_path / "label.nii.gz"
    path.write_bytes(b"first")
    stamp = derived.source_stamp(path)  # written just now: a coarse clock may not tick before the next change
    assert "sha256" in stamp and derived.is_unchanged(stamp)
    path.write_bytes(b"other")
    same_times = {**derived.source_stamp(path), "sha256": stamp["sha256"]}  # what that clock would show
    assert not derived.is_unchanged(same_times)


def test_new_loading_code_or_libraries_is_another_cache(dataset, monkeypatch, tmp_path):
    description, cache = dataset
    step = tmp_path / "code" / "loading_step.py"  # a module on the loading path, as segnet's own are
    step.parent.mkdir()
    step.write_text("SCALE = 1\n")
    monkeypatch.syspath_prepend(str(step.parent))
    monkeypatch.setattr(preprocessing_cache, "LOADING_CODE", (*preprocessing_cache.LOADING_CODE, "loading_step"))
    folders = []
    built = built_cases(monkeypatch)
    for change in ("none", "none", "segnet", "library"):
        if change == "segnet":
            step.write_text("SCALE = 2\n")
        if change == "library":
            monkeypatch.setattr(monai, "__version__", "99.0")  # another MONAI installed
        derived.code_version.cache_clear()
        folders.append(next(iter(preprocess(description, description.labelled, GEOMETRY, str(cache)).values())).folder)
    derived.code_version.cache_clear()
    assert folders[0] == folders[1] and len(set(folders)) == 3
    assert len(built) == 3 * len(description.labelled)  # once for the first and for each change
    assert json.loads((folders[3] / "loading.json").read_text())["code"]["libraries"]["monai"] == "99.0"


def test_a_dataset_reached_through_a_link_is_the_same_cache(tmp_path, monkeypatch):
    root = write_nnunet(tmp_path / "Dataset001_Tiny")
    link = tmp_path / "link"
    link.symlink_to(root)
    built = built_cases(monkeypatch)
    folders = {next(iter(preprocess(d, d.labelled, GEOMETRY, str(tmp_path / "cache")).values())).folder
               for d in (describe_dataset(str(path)) for path in (root, link, root, link))}
    assert len(folders) == 1 and len(built) == 3  # each case once
