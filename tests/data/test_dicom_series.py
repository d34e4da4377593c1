"""DICOM series (the dicom extra) written by pydicom from a generated volume: found anywhere under
a folder, one case per series, sorted by position along the slice normal (not by file name or
instance number), read with their rescale on the volume's grid, and each broken one refused in
one line naming the series and its problem."""

from __future__ import annotations

import numpy as np
import pydicom
import pytest

from helpers.dicom import write_series
from segnet.data.dicom_series import dicom_files, find_series, sorted_headers
from segnet.data.headers import header_problem
from segnet.data.image_files import image_loader, label_ending, read_stamp, write_label
from segnet.data.input_check import check_inputs
from segnet.errors import DatasetError
from segnet.inference.input_cases import find_cases


def rotation(x: float, z: float) -> np.ndarray:
    """A rotation by `x` about R then `z` about S (radians)."""
    cx, sx, cz, sz = np.cos(x), np.sin(x), np.cos(z), np.sin(z)
    return np.array([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]]) @ np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]])


OBLIQUE = np.eye(4)
OBLIQUE[:3, :3] = rotation(0.3, -0.5) @ np.diag([0.7, 0.9, 2.5])  # tilted and rotated, anisotropic
OBLIQUE[:3, 3] = [12.0, -40.0, 7.5]


def volume(shape=(6, 5, 4), seed=0) -> np.ndarray:
    return np.random.default_rng(seed).integers(-1000, 1000, size=shape).astype(np.float64)


def one_series(folder) -> str:
    found = find_series(dicom_files(folder))
    assert len(found) == 1
    return found[0]


def test_an_oblique_series_reads_in_slice_order_on_its_grid_whatever_the_file_names(tmp_path):
    scan = volume()
    names = ["b.dcm", "IM0003", "a.dcm", "zz"]  # neither names nor (reversed) instance numbers give the order
    write_series(scan, OBLIQUE, tmp_path / "patient" / "study" / "ct", names=names)
    (tmp_path / "notes.txt").write_text("not DICOM")
    series = one_series(tmp_path)
    assert [h.filename.rsplit("/", 1)[1] for h in sorted_headers(series)] == names
    loaded = image_loader()(series)
    assert np.array_equal(loaded.numpy(), scan)
    assert np.allclose(loaded.affine.numpy(), OBLIQUE, atol=1e-4)
    assert header_problem(series) is None


@pytest.mark.parametrize(("signed", "slope", "intercept"), [(True, 1.0, 0.0), (False, 1.0, -1024.0),
                                                            (False, 0.5, -600.0), (True, 2.0, 100.0)])
def test_signed_and_unsigned_pixels_read_with_their_rescale(tmp_path, signed, slope, intercept):
    scan = np.round(volume() / slope) * slope  # values the stored integers can hold
    if not signed:
        scan = np.clip(scan, intercept, None)
    write_series(scan, np.diag([1.0, 1.0, 2.0, 1.0]), tmp_path, slope=slope, intercept=intercept, signed=signed)
    stored = pydicom.dcmread(sorted(tmp_path.iterdir())[0]).pixel_array
    assert stored.dtype == (np.int16 if signed else np.uint16)
    assert np.array_equal(image_loader()(one_series(tmp_path)).numpy(), scan)


def test_series_mixed_in_one_folder_are_cases_of_their_own(tmp_path):
    write_series(volume(seed=1), np.eye(4), tmp_path / "mixed", series_uid="1.2.3.1",
                 names=[f"f{i}" for i in (0, 2, 4, 6)])
    write_series(volume(seed=2), OBLIQUE, tmp_path / "mixed", series_uid="1.2.3.2",
                 names=[f"f{i}" for i in (1, 3, 5, 7)])
    cases = find_cases(tmp_path, 1)
    assert [case.name for case in cases] == ["1.2.3.1", "1.2.3.2"]
    assert [case.images[0] for case in cases] == [str(tmp_path / "mixed" / f"1.2.3.{i}.dcmseries") for i in (1, 2)]
    assert np.array_equal(image_loader()(cases[1].images[0]).numpy(), volume(seed=2))
    assert find_cases(tmp_path / "mixed" / "f3", 1) == cases[1:]  # one file: its series


def broken(tmp_path, change) -> str:
    """The problem of a 6-slice series (2 mm apart) once `change`(its files) is done."""
    paths = write_series(volume(shape=(3, 3, 6)), np.diag([1.0, 1.0, 2.0, 1.0]), tmp_path, series_uid="1.2.9",
                         names=[f"s{k}.dcm" for k in range(6)])
    change(paths)
    return header_problem(one_series(tmp_path))


def moved(path, by: float) -> None:
    ds = pydicom.dcmread(path)
    ds.ImagePositionPatient = [*ds.ImagePositionPatient[:2], float(ds.ImagePositionPatient[2]) + by]
    ds.save_as(path)


def test_non_uniform_slice_spacing_is_refused_naming_the_gap(tmp_path):
    problem = broken(tmp_path, lambda paths: [moved(p, 0.8) for p in paths[3:]])
    assert problem == (f"series 1.2.9 in {tmp_path}: non-uniform slice spacing, a gap of 2.80 mm between the slices "
                       "at 4.00 and 6.80 mm along the slice normal (the others 2.00 mm): resample the series to one "
                       "spacing")


def test_missing_slices_are_refused_naming_where_before_prediction_writes(tmp_path):
    problem = broken(tmp_path, lambda paths: [paths[2].unlink(), paths[3].unlink()])
    assert problem == (f"series 1.2.9 in {tmp_path}: 2 slice(s) missing between the slices at 2.00 and 8.00 mm along "
                       "the slice normal (a gap of 6.00 mm, the others 2.00 mm): add them, or predict the series' "
                       "parts separately")
    with pytest.raises(DatasetError) as stopped:  # segnet-predict's check of its inputs, before it writes
        check_inputs(find_cases(tmp_path, 1), 2**30, 1)
    assert str(stopped.value).splitlines()[1:] == [problem]


def test_two_slices_at_one_position_are_refused(tmp_path):
    problem = broken(tmp_path, lambda paths: moved(paths[4], -2.0))
    assert problem == f"series 1.2.9 in {tmp_path}: two slices at 6.00 mm along the slice normal: keep one"


def test_a_tilted_series_is_refused(tmp_path):
    sheared = np.diag([1.0, 1.0, 2.0, 1.0])
    sheared[1, 2] = 0.5  # each slice 0.5 mm further along A: a gantry tilt
    write_series(volume(shape=(3, 3, 6)), sheared, tmp_path, series_uid="1.2.9")
    assert header_problem(one_series(tmp_path)) == (
        f"series 1.2.9 in {tmp_path}: a tilted (sheared) series, its last slice shifted 2.50 mm within its plane from "
        "the first (gantry tilt): resample it, e.g. with dcm2niix")


def test_slices_of_another_size_are_refused(tmp_path):
    def smaller(paths):
        ds = pydicom.dcmread(paths[1])
        ds.Rows, ds.PixelData = 2, ds.PixelData[: 2 * 3 * 2]
        ds.save_as(paths[1])

    assert broken(tmp_path, smaller) == (f"series 1.2.9 in {tmp_path}: its slices differ in Rows (3, 2); one volume "
                                         "needs one")


def test_a_multi_frame_enhanced_object_is_refused(tmp_path):
    def multi_frame(paths):
        ds = pydicom.dcmread(paths[0])
        ds.NumberOfFrames = 6
        ds.save_as(paths[0])

    assert broken(tmp_path, multi_frame) == (
        f"series 1.2.9 in {tmp_path}: a multi-frame (enhanced) DICOM object of 6 frames; segnet reads series of "
        "single-frame slices: convert it, e.g. to NIfTI with dcm2niix")


def test_a_label_map_written_as_dicom_seg_maps_back_onto_the_source_instances_named_by_class(tmp_path):
    import highdicom as hd

    paths = write_series(volume(), OBLIQUE, tmp_path / "ct")
    series = one_series(tmp_path)
    label = np.zeros((6, 5, 4), np.uint8)
    label[1:4, 2:4, 1:3], label[0, 0, 3] = 1, 2
    assert label_ending(series) == ".seg.dcm"
    write_label(label, series, tmp_path / "out.seg.dcm", "model 7", [("liver", (1,)), ("both", (1, 2))])
    seg = hd.seg.segread(tmp_path / "out.seg.dcm")
    assert [(s.SegmentNumber, s.SegmentLabel) for s in seg.SegmentSequence] == [(1, "liver"), (2, "both")]
    assert read_stamp(tmp_path / "out.seg.dcm") == "model 7"
    sources = [pydicom.dcmread(path) for path in paths]  # slice k of the volume is paths[k]
    assert seg.FrameOfReferenceUID == sources[0].FrameOfReferenceUID
    frames = seg.get_pixels_by_source_instance([s.SOPInstanceUID for s in sources])  # (slices, rows, columns, segments)
    assert np.array_equal(np.moveaxis(frames[..., 0], [0, 1, 2], [2, 1, 0]), label == 1)
    assert np.array_equal(np.moveaxis(frames[..., 1], [0, 1, 2], [2, 1, 0]), label > 0)  # a region: overlapping
