"""Image files by format: NIfTI volumes, and natural images as nnU-Net's NaturalImage2DIO and
Tiff3DIO read them (PNG, BMP, JPEG through Pillow; TIFF through tifffile).

A natural image loads as a volume of one slice, (rows, columns, 1), so that everything after the
loader (orientation, the plan's spacing, 2D training on a volume's slices, inverting it all for
prediction) treats it as a scan: an RGB file is three channels in one file, a grey file one. A TIFF
stack (slices, rows, columns) loads as (rows, columns, slices). The spacing is 1 unless a sidecar
JSON beside the file (`{file without its ending}.json`, {"spacing": [...]}, nnU-Net's order:
rows, columns for a 2D image; slices, rows, columns for a stack) says otherwise. Labels are
8-bit grey images; predictions are written in the input's format and size, except that a JPEG
input's label map is a PNG (JPEG's compression would change the class values). NRRD, MHA and
DICOM series are read through SimpleITK (segnet.data.itk_files, the dicom extra); a volume's label
map can be written as NIfTI, NRRD, MHA or, for a DICOM series, DICOM SEG (output_format).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import nibabel as nib
import numpy as np
import tifffile
from monai.data import ImageReader, NibabelReader
from monai.transforms import LoadImage
from monai.utils import ensure_tuple
from PIL import Image
from PIL.PngImagePlugin import PngInfo

from segnet.data import itk_files
from segnet.data.formats import (
    ITK_ENDINGS,
    LOSSY_ENDINGS,
    OUTPUT_ENDINGS,
    SEG_ENDING,
    SERIES_ENDING,
    TIFF_ENDINGS,
    VOLUME_ENDINGS,
    image_ending,
    is_itk,
    is_natural,
)
from segnet.errors import ConfigError

STAMP_KEY = "segnet"  # the PNG text chunk that holds the model that made a label map

# Pillow's modes segnet reads: grey at 1, 8, 16 or 32 bits, and RGB. What to do with the others.
READABLE_MODES = {"1": 1, "L": 1, "I;16": 1, "I;16B": 1, "I": 1, "F": 1, "RGB": 3}
MODE_ADVICE = {
    "RGBA": "an image with an alpha channel: save it without it (RGB or grey)",
    "LA": "an image with an alpha channel: save it without it (RGB or grey)",
    "PA": "a palette image with an alpha channel: save images as RGB or grey, labels as 8-bit grey",
    "P": "a palette image (its values index a colour table): save images as RGB or grey, and labels as "
         "8-bit grey images holding the class values 0..K-1",
}


class UnreadableFormat(ValueError):
    """A natural image whose pixel kind segnet does not read; the message says what to do."""


@dataclass(frozen=True)
class Stored:
    """What a natural image file holds, from its header: its size in nnU-Net's axis order (rows,
    columns; or slices, rows, columns), its channels, and its pixel type as Pillow or tifffile
    name it."""
    size: tuple[int, ...]
    channels: int
    kind: str
    integer_bits: int | None  # 8 for uint8 files; None for float pixels


def stored(path: str | Path) -> Stored:
    """The header of a natural image; UnreadableFormat says what segnet cannot read in it."""
    if image_ending(path) in TIFF_ENDINGS:
        with tifffile.TiffFile(path) as tiff:
            series, page = tiff.series[0], tiff.pages[0]
            if page.extrasamples:
                raise UnreadableFormat(MODE_ADVICE["RGBA"])
            if page.photometric == tifffile.PHOTOMETRIC.PALETTE:
                raise UnreadableFormat(MODE_ADVICE["P"])
            samples = "S" in series.axes
            size = tuple(int(n) for n, axis in zip(series.shape, series.axes, strict=True) if axis != "S")
            if len(size) not in (2, 3):
                raise UnreadableFormat(f"a TIFF of axes {series.axes} {tuple(series.shape)}; segnet reads 2D images "
                                 "and 3D stacks (slices, rows, columns), grey or RGB")
            dtype = np.dtype(series.dtype)
            bits = 8 * dtype.itemsize if dtype.kind in "ub" else None
            return Stored(size, int(series.shape[series.axes.index("S")]) if samples else 1, str(dtype), bits)
    with Image.open(path) as image:  # the header only
        if image.mode in MODE_ADVICE:
            raise UnreadableFormat(f"PIL mode {image.mode}, {MODE_ADVICE[image.mode]}")
        if image.mode not in READABLE_MODES:
            raise UnreadableFormat(f"PIL mode {image.mode}; segnet reads grey or RGB images: convert it to RGB")
        bits = {"1": 1, "L": 8, "RGB": 8, "I;16": 16, "I;16B": 16, "I": 32}.get(image.mode)
        return Stored((image.height, image.width), READABLE_MODES[image.mode], f"PIL mode {image.mode}", bits)


def file_channels(path: str | Path) -> int:
    """The channels one image file holds: an RGB image's three, a 4D NIfTI's fourth axis; 1 where
    the header cannot be read (its check names the file)."""
    try:
        if is_natural(path):
            return stored(path).channels
        if is_itk(path):
            return 1 if image_ending(path) == SERIES_ENDING else itk_files.header(path).GetNumberOfComponents()
        shape = nib.load(path).shape
        return int(shape[3]) if len(shape) == 4 else 1
    except Exception:  # any way a header can be broken
        return 1


def sidecar_spacing(path: str | Path, dims: int) -> list[float]:
    """The spacing in nnU-Net's axis order from the file's sidecar JSON, else 1 along every axis."""
    sidecar = Path(str(path)[: -len(image_ending(path))] + ".json")
    if not sidecar.is_file():
        return [1.0] * dims
    try:
        spacing = [float(s) for s in json.loads(sidecar.read_text())["spacing"]]
    except (ValueError, KeyError, TypeError) as error:
        raise UnreadableFormat(f"{sidecar}: needs {{\"spacing\": [{dims} numbers]}} ({error})") from None
    if len(spacing) != dims or not all(np.isfinite(s) and s > 0 for s in spacing):
        raise UnreadableFormat(f"{sidecar}: spacing {spacing}; {dims} positive numbers are needed for this image")
    return spacing


def read_natural(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(array (rows, columns, slices[, channels]), affine) of a natural image: a 2D image is one
    slice; the affine scales by the spacing and does nothing else."""
    header = stored(path)
    array = tifffile.imread(path) if image_ending(path) in TIFF_ENDINGS else np.asarray(Image.open(path))
    if len(header.size) == 2:
        array = array[:, :, None]  # one slice
    else:
        array = np.moveaxis(array, 0, 2)  # slices last, as a scan's 2D plan slices it
    spacing = sidecar_spacing(path, len(header.size))
    in_order = spacing + [1.0] if len(spacing) == 2 else [spacing[1], spacing[2], spacing[0]]
    return array, np.diag([*in_order, 1.0])


class NaturalImageReader(ImageReader):
    """MONAI's reader of natural images: several files of one case (one per channel) are its
    channels, last, as an RGB file's are."""

    def verify_suffix(self, filename: Sequence[str] | str) -> bool:
        return all(is_natural(f) for f in ensure_tuple(filename))

    def read(self, data: Sequence[str] | str, **kwargs) -> list[tuple[np.ndarray, np.ndarray]]:
        return [read_natural(path) for path in ensure_tuple(data)]

    def get_data(self, img: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, dict]:
        arrays = [array for array, _ in img]
        affine = img[0][1]
        spatial = arrays[0].shape[:3]
        if len(arrays) > 1:
            arrays = [a if a.ndim == 4 else a[..., None] for a in arrays]
        data = arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=-1)
        meta = {"affine": affine, "original_affine": affine.copy(), "spatial_shape": np.asarray(spatial),
                "original_channel_dim": -1 if data.ndim == 4 else float("nan")}
        return data, meta


class ImageFileReader(ImageReader):
    """The reader each file's format names: NaturalImageReader for natural images, SimpleITKReader
    for NRRD, MHA and DICOM series, MONAI's NibabelReader for NIfTI. Given readers, MONAI's
    LoadImage tries each in turn and logs every one that fails ("NaturalImageReader: unable to
    load ...", a line per NIfTI file that reads like an error); this one is the first it tries and
    reads every format segnet reads."""

    def __init__(self):
        super().__init__()
        self.natural, self.itk, self.volume = NaturalImageReader(), itk_files.SimpleITKReader(), NibabelReader()

    def chosen(self, filename: Sequence[str] | str) -> ImageReader:
        return next((r for r in (self.natural, self.itk) if r.verify_suffix(filename)), self.volume)

    def verify_suffix(self, filename: Sequence[str] | str) -> bool:
        return self.chosen(filename).verify_suffix(filename)

    def read(self, data: Sequence[str] | str, **kwargs) -> tuple[ImageReader, object]:
        reader = self.chosen(data)
        return reader, reader.read(data, **kwargs)

    def get_data(self, img: tuple[ImageReader, object]) -> tuple[np.ndarray, dict]:
        reader, read = img
        return reader.get_data(read)


def image_loader() -> LoadImage:
    """MONAI's loader of every format segnet reads, each array as stored."""
    return LoadImage(image_only=True, reader=ImageFileReader())


def label_ending(image_path: str | Path, output_format: str | None = None) -> str:
    """The ending a label map predicted for this image is written with: output_format's, else the
    image's own, but PNG for JPEG (lossy), .nii.gz for NIfTI and DICOM SEG for a DICOM series."""
    own = image_ending(image_path)
    if output_format is None:
        return ".nii.gz" if own in VOLUME_ENDINGS else ".png" if own in LOSSY_ENDINGS else \
            SEG_ENDING if own == SERIES_ENDING else own
    if output_format not in OUTPUT_ENDINGS:
        raise ConfigError(f"output_format={output_format}: choose one of {', '.join(OUTPUT_ENDINGS)}, or leave it "
                          "out for the input's own format")
    if is_natural(image_path) or (output_format == "dicom_seg" and own != SERIES_ENDING):
        raise ConfigError(f"output_format={output_format} cannot hold the label map of {image_path}: DICOM SEG is "
                          "written for DICOM series, and a natural image's label map in its own format (leave "
                          "output_format out)")
    return OUTPUT_ENDINGS[output_format]


def stored_files(path: str | Path) -> list[str]:
    """The files an image is stored in: the file itself, or a DICOM series' slices."""
    if image_ending(path) != SERIES_ENDING:
        return [str(path)]
    from segnet.data.dicom_series import series_files

    return series_files(str(path))


def read_array(path: str | Path) -> np.ndarray:
    """An image's voxels as stored (a natural image as a volume of one slice, channels last)."""
    if is_itk(path):
        return itk_files.read_volume(path)[0]
    return read_natural(path)[0] if is_natural(path) else np.asarray(nib.load(path).dataobj)


def read_label(path: str | Path) -> tuple[np.ndarray, list[float]]:
    """A label map as stored, int64, and its spacing."""
    if is_natural(path):
        array, affine = read_natural(path)
        return array.astype(np.int64), np.diag(affine)[:3].tolist()
    if is_itk(path):
        array, affine = itk_files.read_volume(path)
        return array.astype(np.int64), np.linalg.norm(affine[:3, :3], axis=0).tolist()
    image = nib.load(path)
    array = np.asarray(image.dataobj).astype(np.int64)
    return array, [float(s) for s in image.header.get_zooms()[: array.ndim]]


def write_label(label_map: np.ndarray, image_path: str | Path, target: str | Path, stamp: str = "",
                segments: Sequence[tuple[str, Sequence[int]]] = ()) -> None:
    """A uint8 label map on the grid of the image at `image_path`, in the format `target`'s ending
    names, with `stamp` (the model that made it) where the format has a place for it; `segments`
    (a DICOM SEG's: each class's or region's name and label values)."""
    label_map = label_map.astype(np.uint8)
    if image_ending(target) == SEG_ENDING:
        from segnet.data.dicom_seg import write_seg

        write_seg(label_map, str(image_path), target, stamp, segments)
        return
    if image_ending(target) in ITK_ENDINGS:
        itk_files.write_itk(label_map, volume_affine(image_path), target, stamp)
        return
    if not is_natural(target):
        image = nib.load(image_path) if image_ending(image_path) in VOLUME_ENDINGS else None
        out = nifti_like(label_map, image, stamp) if image else nib.Nifti1Image(label_map, volume_affine(image_path))
        out.header["descrip"] = stamp
        nib.save(out, str(target))
        return
    plane = label_map[:, :, 0] if label_map.shape[2] == 1 else np.moveaxis(label_map, 2, 0)
    if image_ending(target) in TIFF_ENDINGS:
        tifffile.imwrite(target, plane, description=stamp or None, metadata=None, photometric="minisblack")
    elif image_ending(target) == ".png":
        info = PngInfo()
        info.add_text(STAMP_KEY, stamp)
        Image.fromarray(plane).save(target, pnginfo=info)
    else:
        Image.fromarray(plane).save(target)


def volume_affine(path: str | Path) -> np.ndarray:
    """The RAS affine of a NIfTI, NRRD or MHA file or a DICOM series."""
    if is_itk(path):
        return itk_files.affine_of(itk_files.header(path)) if image_ending(path) in ITK_ENDINGS else \
            itk_files.read_volume(path)[1]
    return nib.load(path).affine


def nifti_like(label_map: np.ndarray, image: nib.Nifti1Image, description: str = "") -> nib.Nifti1Image:
    """A uint8 NIfTI on the image's grid: same affine, qform and sform codes, no intensity scaling;
    `description` in its header."""
    out = nib.Nifti1Image(label_map.astype(np.uint8), image.affine)
    out.header["descrip"] = description
    qform, qcode = image.get_qform(coded=True)
    sform, scode = image.get_sform(coded=True)
    out.set_qform(qform if qform is not None else image.affine, int(qcode) if qform is not None else 1)
    out.set_sform(sform if sform is not None else image.affine, int(scode) if sform is not None else 1)
    out.header.set_xyzt_units(*image.header.get_xyzt_units())
    return out


def read_stamp(path: str | Path) -> str | None:
    """The stamp write_label put in a label map; None where the file cannot be read or its format
    has no place for one (BMP)."""
    try:
        if image_ending(path) == SEG_ENDING:
            from segnet.data.dicom_seg import read_seg_stamp

            return read_seg_stamp(path)
        if image_ending(path) in ITK_ENDINGS:
            return itk_files.read_itk_stamp(path)
        if not is_natural(path):
            return nib.load(path).header["descrip"].item().decode()
        if image_ending(path) in TIFF_ENDINGS:
            with tifffile.TiffFile(path) as tiff:
                return tiff.pages[0].description
        with Image.open(path) as image:
            return getattr(image, "text", {}).get(STAMP_KEY)
    except Exception:  # any way a file can be broken
        return None
