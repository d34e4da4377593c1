"""NRRD and MetaImage (.mha) volumes through SimpleITK, as nnU-Net's SimpleITKIO reads them, and
DICOM series once their files are sorted (segnet.data.dicom_series).

MONAI reads these with ITKReader, which needs ITK's Python wrapping (itk); SimpleITK, which
nnU-Net reads them with and installs anyway, wraps the same ITK readers, so segnet reads them
with it, behind MONAI's ImageReader interface: one library for NRRD, MHA and DICOM series.
ITK stores (z, y, x) arrays on an LPS grid; segnet's loaders take NIfTI's (x, y, z) arrays with
an RAS affine, so the arrays are transposed and the affine's first two world axes negated, as
MONAI's ITKReader does by default.
A label map written for an image carries that image's origin, spacing and direction, and the
model's stamp as the "segnet" header field.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from monai.data import ImageReader
from monai.utils import ensure_tuple

from segnet.data.dicom_extra import extra_module
from segnet.data.formats import SERIES_ENDING, image_ending, is_itk

STAMP_FIELD = "segnet"
LPS = np.diag([-1.0, -1.0, 1.0])  # RAS <-> LPS: both flips are their own inverse


def sitk():
    return extra_module("SimpleITK")


def affine_of(image) -> np.ndarray:
    """The RAS affine (4 x 4) of a 3D SimpleITK image or image reader's header."""
    direction = np.asarray(image.GetDirection(), np.float64).reshape(3, 3)
    affine = np.eye(4)
    affine[:3, :3] = LPS @ direction @ np.diag(image.GetSpacing())
    affine[:3, 3] = LPS @ np.asarray(image.GetOrigin(), np.float64)
    return affine


def set_affine(image, affine: np.ndarray) -> None:
    """Gives a 3D SimpleITK image the grid of an RAS affine."""
    columns = LPS @ np.asarray(affine, np.float64)[:3, :3]
    spacing = np.linalg.norm(columns, axis=0)
    image.SetSpacing(spacing.tolist())
    image.SetDirection((columns / spacing).ravel().tolist())
    image.SetOrigin((LPS @ np.asarray(affine, np.float64)[:3, 3]).tolist())


def as_volume(image) -> tuple[np.ndarray, np.ndarray]:
    """(array (x, y, z[, components]), RAS affine) of a 3D SimpleITK image."""
    array = sitk().GetArrayFromImage(image)
    return np.moveaxis(array, [0, 1, 2], [2, 1, 0]), affine_of(image)


def header(path: str | Path):
    """SimpleITK's reader of `path` with the header read (size, spacing, components, fields)."""
    reader = sitk().ImageFileReader()
    reader.SetFileName(str(path))
    reader.ReadImageInformation()
    return reader


def read_itk(paths: Sequence[str | Path] | str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(array (x, y, z[, components]), RAS affine) of an NRRD or MHA file, or of a DICOM series'
    files given in slice order (SimpleITK's series reader applies rescale slope and intercept)."""
    files = [str(p) for p in paths] if isinstance(paths, (list, tuple)) else str(paths)
    return as_volume(sitk().ReadImage(files))


def write_itk(label_map: np.ndarray, affine: np.ndarray, target: str | Path, stamp: str = "") -> None:
    """A uint8 label map (x, y, z) on the RAS `affine`'s grid, compressed, in the format the
    target's ending names (ITK's writer picks by ending: the target is a temporary of that ending)."""
    image = sitk().GetImageFromArray(np.ascontiguousarray(np.moveaxis(label_map.astype(np.uint8), [0, 2], [2, 0])))
    set_affine(image, affine)
    image.SetMetaData(STAMP_FIELD, stamp)
    sitk().WriteImage(image, str(target), True)


def read_itk_stamp(path: str | Path) -> str | None:
    reader = header(path)
    return reader.GetMetaData(STAMP_FIELD) if reader.HasMetaDataKey(STAMP_FIELD) else None


def read_volume(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """An NRRD or MHA file, or a DICOM series by its name (segnet.data.dicom_series)."""
    from segnet.data.dicom_series import series_files

    return read_itk(series_files(str(path)) if image_ending(path) == SERIES_ENDING else path)


class SimpleITKReader(ImageReader):
    """MONAI's reader interface over read_volume: one file per case (its components are channels,
    last, as NibabelReader gives a 4D NIfTI's)."""

    def verify_suffix(self, filename: Sequence[str] | str) -> bool:
        return all(is_itk(f) for f in ensure_tuple(filename))

    def read(self, data: Sequence[str] | str, **kwargs) -> tuple[np.ndarray, np.ndarray]:
        files = ensure_tuple(data)
        if len(files) != 1:
            raise ValueError(f"{', '.join(map(str, files))}: one NRRD, MHA or DICOM series per case, its channels "
                             "as components")
        return read_volume(files[0])

    def get_data(self, img: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, dict]:
        array, affine = img
        meta = {"affine": affine, "original_affine": affine.copy(), "spatial_shape": np.asarray(array.shape[:3]),
                "original_channel_dim": -1 if array.ndim == 4 else float("nan")}
        return array, meta
