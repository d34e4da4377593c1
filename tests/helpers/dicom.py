"""DICOM series written by pydicom from a volume and its RAS affine, as a scanner would store
them: one CT slice per file, its position, orientation and rescale in the header."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.uid import CTImageStorage, ExplicitVRLittleEndian, generate_uid

LPS = np.diag([-1.0, -1.0, 1.0])


def write_series(volume: np.ndarray, affine: np.ndarray, folder: Path, slope: float = 1.0, intercept: float = 0.0,
                 signed: bool = True, series_uid: str | None = None, names: list[str] | None = None) -> list[Path]:
    """`volume` (x, y, z) as one file per slice under `folder`, stored as (value - intercept) /
    slope in 16 bits; slice k at the affine's voxel (0, 0, k). Files are named by `names` (default:
    in reverse slice order) and numbered in reverse, so only the positions tell the order."""
    folder.mkdir(parents=True, exist_ok=True)
    columns = LPS @ affine[:3, :3]
    spacing = np.linalg.norm(columns, axis=0)
    row_direction, column_direction = columns[:, 0] / spacing[0], columns[:, 1] / spacing[1]
    stored = np.round((volume - intercept) / slope).astype(np.int16 if signed else np.uint16)
    series_uid = series_uid or generate_uid()
    study, frame = generate_uid(prefix="1.2.826.0.1.3680043.10.1."), generate_uid()
    slices = volume.shape[2]
    names = names or [f"slice{slices - k:03d}.dcm" for k in range(slices)]
    paths = []
    for k in range(slices):
        meta = FileMetaDataset()
        meta.MediaStorageSOPClassUID, meta.MediaStorageSOPInstanceUID = CTImageStorage, generate_uid()
        meta.TransferSyntaxUID = ExplicitVRLittleEndian
        ds = Dataset()
        ds.file_meta = meta
        ds.SOPClassUID, ds.SOPInstanceUID = CTImageStorage, meta.MediaStorageSOPInstanceUID
        ds.PatientName, ds.PatientID, ds.PatientBirthDate, ds.PatientSex = "Phantom", "P1", "", "O"
        ds.StudyInstanceUID, ds.StudyDate, ds.StudyTime, ds.StudyID = study, "20260101", "120000", "1"
        ds.AccessionNumber, ds.ReferringPhysicianName = "", ""
        ds.SeriesInstanceUID, ds.SeriesNumber, ds.Modality = series_uid, 1, "CT"
        ds.FrameOfReferenceUID, ds.PositionReferenceIndicator = frame, ""
        ds.Manufacturer, ds.InstanceNumber = "generated", slices - k
        ds.ImagePositionPatient = [float(v) for v in LPS @ (affine @ [0, 0, k, 1])[:3]]
        ds.ImageOrientationPatient = [float(v) for v in (*row_direction, *column_direction)]
        ds.PixelSpacing = [float(spacing[1]), float(spacing[0])]  # between rows, between columns
        ds.SliceThickness = float(spacing[2])
        ds.Rows, ds.Columns = volume.shape[1], volume.shape[0]
        ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
        ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 16, 15, int(signed)
        ds.RescaleSlope, ds.RescaleIntercept, ds.RescaleType = slope, intercept, "HU"
        ds.PixelData = np.ascontiguousarray(stored[:, :, k].T).tobytes()
        path = folder / names[k]
        ds.save_as(path, enforce_file_format=True)
        paths.append(path)
    return paths
