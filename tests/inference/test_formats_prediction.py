"""segnet-predict on NRRD, MHA and DICOM series (the dicom extra): the same volume predicts to the
same voxels in every format, each label map in its input's format by default, a DICOM series' as
a DICOM SEG that highdicom reads back onto the source instances, segments named by class."""

from __future__ import annotations

import highdicom as hd
import nibabel as nib
import numpy as np
import pydicom
import SimpleITK as sitk

from helpers.dicom import write_series
from helpers.training import compose_config
from segnet.data.dicom_series import series_files
from segnet.data.image_files import read_label
from segnet.data.itk_files import set_affine
from segnet.inference.predict import predict_command


def predict(run, images, out, tmp_path, *overrides):
    cfg = compose_config([f"ckpt_path={run}/checkpoints/last.ckpt", f"input={images}", f"output={out}", "op=cpp",
                          "tta=false", "num_workers=0", *overrides], tmp_path / "hydra", name="predict")
    return {prediction.case.name: prediction for prediction in predict_command(cfg)}


def test_a_volume_predicts_alike_as_nifti_mha_nrrd_and_a_dicom_series_whose_seg_maps_back(trained_3d, tmp_path):
    root, run = trained_3d
    scan = nib.load(root / "imagesTr" / "case_000.nii.gz")  # on the task's oblique grid
    volume = np.round(scan.get_fdata() * 2) / 2  # what a series stored with slope 0.5 holds
    images = tmp_path / "in"
    images.mkdir()
    nib.save(nib.Nifti1Image(volume.astype(np.float32), scan.affine), str(images / "as_nifti.nii.gz"))
    for ending in (".mha", ".nrrd"):
        itk = sitk.GetImageFromArray(np.moveaxis(volume.astype(np.float32), [0, 2], [2, 0]))
        set_affine(itk, scan.affine)
        sitk.WriteImage(itk, str(images / f"as_{ending[1:]}{ending}"))
    sources = write_series(volume, scan.affine, images / "patient" / "ct", slope=0.5, series_uid="1.2.826.0.1.7")
    predicted = predict(run, images, tmp_path / "out", tmp_path)
    reference = np.asarray(nib.load(tmp_path / "out" / "as_nifti.nii.gz").dataobj)
    assert sorted(p.file.name for p in predicted.values()) == ["1.2.826.0.1.7.seg.dcm", "as_mha.mha", "as_nifti.nii.gz",
                                                               "as_nrrd.nrrd"]
    assert set(np.unique(reference)) == {0, 1, 2}
    for name in ("as_mha.mha", "as_nrrd.nrrd"):
        assert np.array_equal(read_label(tmp_path / "out" / name)[0], reference)
    assert np.array_equal(predicted["1.2.826.0.1.7"].label_map, reference)

    seg = hd.seg.segread(tmp_path / "out" / "1.2.826.0.1.7.seg.dcm")
    assert [(s.SegmentNumber, s.SegmentLabel) for s in seg.SegmentSequence] == [(1, "core"), (2, "shell")]
    algorithm = seg.SegmentSequence[0].SegmentationAlgorithmIdentificationSequence[0]
    assert algorithm.AlgorithmName == "segnet" and "segnet-predict model " in algorithm.AlgorithmParameters
    series = str(images / "patient" / "ct" / "1.2.826.0.1.7.dcmseries")
    source = [pydicom.dcmread(path) for path in series_files(series)]
    assert {str(s.SOPInstanceUID) for s in source} == {str(pydicom.dcmread(p).SOPInstanceUID) for p in sources}
    assert seg.FrameOfReferenceUID == source[0].FrameOfReferenceUID
    frames = seg.get_pixels_by_source_instance([s.SOPInstanceUID for s in source], combine_segments=True)
    assert np.array_equal(np.moveaxis(frames, [0, 1, 2], [2, 1, 0]), reference)  # slice k on source k

    as_nifti = predict(run, images / "patient", tmp_path / "nifti", tmp_path, "output_format=nifti")
    written = nib.load(as_nifti["1.2.826.0.1.7"].file)
    assert np.array_equal(np.asarray(written.dataobj), reference)
    assert np.allclose(written.affine, scan.affine, atol=1e-4)
