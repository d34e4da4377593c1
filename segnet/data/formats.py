"""The image formats segnet reads, by file ending (what reads and writes them:
segnet.data.image_files). Names only, so that a command's --help and the config's resolvers
import none of the readers."""

from __future__ import annotations

from pathlib import Path

VOLUME_ENDINGS = (".nii.gz", ".nii")
PILLOW_ENDINGS = (".png", ".bmp", ".jpg", ".jpeg")
TIFF_ENDINGS = (".tif", ".tiff")
NATURAL_ENDINGS = PILLOW_ENDINGS + TIFF_ENDINGS
IMAGE_ENDINGS = VOLUME_ENDINGS + NATURAL_ENDINGS
LOSSY_ENDINGS = (".jpg", ".jpeg")


def image_ending(path: str | Path) -> str | None:
    """The image ending of a file name (.nii.gz, .png, ...), lower case; None for any other file."""
    name = Path(path).name.lower()
    return next((e for e in IMAGE_ENDINGS if name.endswith(e)), None)


def is_natural(path: str | Path) -> bool:
    return image_ending(path) in NATURAL_ENDINGS
