"""The image formats segnet reads, by file ending (what reads and writes them:
segnet.data.image_files). Names only, so that a command's --help and the config's resolvers
import none of the readers."""

from __future__ import annotations

from pathlib import Path

VOLUME_ENDINGS = (".nii.gz", ".nii")
ITK_ENDINGS = (".nrrd", ".mha")  # through SimpleITK, the dicom extra
PILLOW_ENDINGS = (".png", ".bmp", ".jpg", ".jpeg")
TIFF_ENDINGS = (".tif", ".tiff")
NATURAL_ENDINGS = PILLOW_ENDINGS + TIFF_ENDINGS
IMAGE_ENDINGS = VOLUME_ENDINGS + ITK_ENDINGS + NATURAL_ENDINGS  # what a dataset's files may be
LOSSY_ENDINGS = (".jpg", ".jpeg")
SERIES_ENDING = ".dcmseries"  # a DICOM series' name in a case's files (segnet.data.dicom_series)
SEG_ENDING = ".seg.dcm"  # a label map written as DICOM SEG
# output_format's choices, by the ending each writes
OUTPUT_ENDINGS = {"nifti": ".nii.gz", "nrrd": ".nrrd", "mha": ".mha", "dicom_seg": SEG_ENDING}


def image_ending(path: str | Path) -> str | None:
    """The image ending of a file name (.nii.gz, .png, ...), lower case; None for any other file."""
    name = Path(path).name.lower()
    return next((e for e in (*IMAGE_ENDINGS, SERIES_ENDING, SEG_ENDING) if name.endswith(e)), None)


def is_natural(path: str | Path) -> bool:
    return image_ending(path) in NATURAL_ENDINGS


def is_itk(path: str | Path) -> bool:
    """NRRD, MHA or a DICOM series: what SimpleITK reads."""
    return image_ending(path) in (*ITK_ENDINGS, SERIES_ENDING)
