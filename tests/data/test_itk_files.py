"""NRRD and MHA volumes (SimpleITK, the dicom extra): read on the grid their header gives, as a
NIfTI of the same volume reads; label maps written back in the image's own format and grid."""

from __future__ import annotations

import sys

import nibabel as nib
import numpy as np
import pytest
import SimpleITK as sitk

from helpers.data import OBLIQUE_AFFINE
from segnet.data.headers import header_problem
from segnet.data.image_files import image_loader, label_ending, read_label, read_stamp, write_label
from segnet.data.itk_files import write_itk
from segnet.errors import ConfigError

# a rotated grid (about S by 30 degrees), anisotropic spacing, an origin off zero
ROTATED = np.array([[0.866 * 0.7, -0.5 * 0.9, 0, 12.0], [0.5 * 0.7, 0.866 * 0.9, 0, -7.5], [0, 0, 2.5, 3.0],
                    [0, 0, 0, 1]])


@pytest.mark.parametrize("ending", [".nrrd", ".mha"])
@pytest.mark.parametrize("affine", [ROTATED, OBLIQUE_AFFINE], ids=["rotated", "permuted"])
def test_an_itk_volume_reads_as_the_same_volume_as_nifti_and_its_label_map_keeps_the_grid(tmp_path, ending, affine):
    volume = np.random.default_rng(0).normal(size=(5, 6, 7)).astype(np.float32)
    nib.save(nib.Nifti1Image(volume, affine), str(tmp_path / "scan.nii.gz"))
    write_itk(volume, affine, tmp_path / f"scan{ending}")  # uint8 by design: a label map's writer
    itk = sitk.GetImageFromArray(np.moveaxis(volume, [0, 2], [2, 0]))
    itk.CopyInformation(sitk.ReadImage(str(tmp_path / f"scan{ending}")))
    sitk.WriteImage(itk, str(tmp_path / f"scan{ending}"))
    loaded, reference = image_loader()(str(tmp_path / f"scan{ending}")), image_loader()(str(tmp_path / "scan.nii.gz"))
    assert np.array_equal(loaded.numpy(), reference.numpy())
    assert np.allclose(loaded.affine.numpy(), reference.affine.numpy(), atol=1e-5)
    assert header_problem(tmp_path / f"scan{ending}") is None
    label = (volume > 0).astype(np.uint8)
    assert label_ending(tmp_path / f"scan{ending}") == ending
    write_label(label, tmp_path / f"scan{ending}", tmp_path / f"label{ending}", "model 1")
    written, spacing = read_label(tmp_path / f"label{ending}")
    assert np.array_equal(written, label) and np.allclose(spacing, np.linalg.norm(affine[:3, :3], axis=0))
    assert read_stamp(tmp_path / f"label{ending}") == "model 1"
    assert np.allclose(image_loader()(str(tmp_path / f"label{ending}")).affine.numpy(), affine, atol=1e-5)
    write_label(label, tmp_path / f"scan{ending}", tmp_path / "label.nii.gz", "model 1")  # output_format=nifti
    as_nifti = nib.load(tmp_path / "label.nii.gz")
    assert np.allclose(as_nifti.affine, affine, atol=1e-5) and np.array_equal(np.asarray(as_nifti.dataobj), label)


def test_a_2d_mha_and_an_unknown_output_format_are_refused_in_one_line(tmp_path):
    sitk.WriteImage(sitk.GetImageFromArray(np.zeros((4, 5), np.uint8)), str(tmp_path / "flat.mha"))
    assert header_problem(tmp_path / "flat.mha") == f"{tmp_path / 'flat.mha'}: a 2D image; a 3D volume is expected"
    with pytest.raises(ConfigError, match=r"^output_format=dicom_seg cannot hold the label map of .*flat.mha"):
        label_ending(tmp_path / "flat.mha", "dicom_seg")
    with pytest.raises(ConfigError, match=r"^output_format=png: choose one of nifti, nrrd, mha, dicom_seg"):
        label_ending(tmp_path / "flat.mha", "png")
    assert label_ending(tmp_path / "flat.mha", "nifti") == ".nii.gz"


def test_without_the_extra_an_itk_file_names_the_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "SimpleITK", None)  # what `import SimpleITK` finds: not installed
    with pytest.raises(ConfigError, match=r"^NRRD, MHA and DICOM files need SimpleITK: pip install -e '\.\[dicom\]'$"):
        read_label(tmp_path / "scan.nrrd")
