"""The cases of a prediction's input folder: nnU-Net's channel naming, or any image files and
DICOM series (segnet.data.dicom_series), one case each, for one-channel models."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from segnet.data.dataset_json import Case, image_stem
from segnet.data.dicom_series import dicom_files, find_series, is_dicom_file
from segnet.data.formats import IMAGE_ENDINGS
from segnet.data.image_files import file_channels
from segnet.errors import ConfigError, DatasetError

log = logging.getLogger(__name__)
CHANNEL_FILE = re.compile(r"^(?P<case>.+)_(?P<channel>\d{4})$")


def find_cases(source: Path, in_channels: int) -> list[Case]:
    """The images under `source` (a folder, or one file), grouped into cases: nnU-Net's channel
    naming `{case}_0000.nii.gz`, `{case}_0001.nii.gz`, ... (a file holding several channels, an RGB
    PNG say, counts them all) or, for one-channel models, any image files and the DICOM series
    anywhere under `source` (one case per SeriesInstanceUID), one case each. A
    one-channel model reads the names as nnU-Net's only where every file ends in _0000: in a folder
    of frame_0000.png, frame_0001.png, ... each file is a case of its own."""
    if not source.exists():
        raise ConfigError(f"input={source} does not exist; point it at a folder of images or one image file")
    files = [source] if source.is_file() else sorted(source.iterdir())
    # DICOM files by content: their names need no ending; one file given stands for its series
    dicom = dicom_files(source) if source.is_dir() else [source] if is_dicom_file(source) else []
    holding = {folder for path in dicom for folder in path.parents}  # not named as skipped below
    files = [p for p in files if p not in dicom and p not in holding] + [Path(s) for s in find_series(dicom)]
    if source.is_file() and in_channels > 1:  # the case's other channels lie beside it
        match = CHANNEL_FILE.match(image_stem(source) or "")
        files = sorted(p for p in source.parent.iterdir()
                       if match and (image_stem(p) or "").startswith(match["case"] + "_"))
    skipped = [p.name for p in files if image_stem(p) is None]
    if skipped:  # sidecar files (.json, notes), hidden files, sub-folders
        log.info("input=%s: skipping %d entries that are not images: %s", source, len(skipped), ", ".join(skipped[:5]))
    files = [p for p in files if image_stem(p) is not None]
    if not files:
        raise ConfigError(f"input={source} holds no images ({', '.join(IMAGE_ENDINGS)}) nor DICOM series")
    matches = [CHANNEL_FILE.match(image_stem(path)) for path in files]
    by_channel = in_channels > 1 or all(match and match["channel"] == "0000" for match in matches)
    channels: dict[str, dict[int, Path]] = {}
    for path, match in zip(files, matches, strict=True):
        name, channel = (match["case"], int(match["channel"])) if by_channel and match else (image_stem(path), 0)
        if channel in channels.setdefault(name, {}):
            raise DatasetError(f"{channels[name][channel]} and {path} are both case {name}'s channel {channel}: keep "
                               "one of them in the input folder")
        channels[name][channel] = path
    return [Case(name, tuple(map(str, channel_files(name, found, in_channels, source))), None)
            for name, found in sorted(channels.items())]


def channel_files(name: str, found: dict[int, Path], in_channels: int, source: Path) -> list[Path]:
    """A case's files in channel order, once they hold the model's channels: a file per channel
    (no header read), or files holding several (an RGB PNG), counted."""
    files = [found[channel] for channel in sorted(found)]
    fix = (f"name them {name}_0000 .. {name}_{in_channels - 1:04d}, one channel each, or give one file holding "
           f"all {in_channels}")
    if sorted(found) != list(range(len(found))):
        raise DatasetError(f"case {name} in {source} has channel files numbered {sorted(found)}, not 0 to "
                           f"{len(found) - 1}, and the model takes {in_channels} channel(s): {fix}")
    held = len(files) if len(files) == in_channels else sum(file_channels(path) for path in files)
    if held != in_channels:
        raise DatasetError(f"case {name} in {source}: {', '.join(p.name for p in files)} hold {held} channel(s) but "
                           f"the model takes {in_channels}: {fix}")
    return files
