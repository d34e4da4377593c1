"""DICOM series as prediction inputs: found anywhere under a folder, one case per
SeriesInstanceUID, their slices sorted by position along the slice normal (never by file name or
instance number), checked, then read by SimpleITK in that order (segnet.data.itk_files), which
applies each slice's rescale slope and intercept to its signed or unsigned pixels.

A series stands in a case's file list as `{folder}/{SeriesInstanceUID}.dcmseries` (a name, not a
file): its folder's DICOM files of that UID, at any depth. Refused, in one line naming the series
and the problem: multi-frame (enhanced) objects, slices of differing orientation, size or pixel
spacing, two slices at one position, missing slices, non-uniform slice spacing (a gap of
another length than the others') and tilted (sheared) slice stacks. Datasets for training stay
NIfTI, NRRD, MHA or natural images.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from segnet.data.dicom_extra import extra_module
from segnet.data.formats import SERIES_ENDING

log = logging.getLogger(__name__)
PREAMBLE = 128  # bytes before a DICOM file's "DICM" marker
SPACING_TOLERANCE = 0.01  # relative: slices whose spacing differs by more are not one grid


class SeriesProblem(ValueError):
    """A series segnet does not read; the message names it and what is wrong."""


def is_dicom_file(path: Path) -> bool:
    """Whether `path` is a DICOM file (Part 10: the "DICM" marker after the preamble)."""
    try:
        with open(path, "rb") as f:
            return f.read(PREAMBLE + 4)[PREAMBLE:] == b"DICM"
    except OSError:
        return False


def dicom_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and is_dicom_file(p))


def image_headers(files: list[Path]) -> dict[str, list]:
    """The headers (no pixels) of the image objects among `files`, by SeriesInstanceUID; objects
    without pixels on a grid (a SEG, a structure set, a report) are left out."""
    pydicom = extra_module("pydicom")
    series = defaultdict(list)
    for path in files:
        header = pydicom.dcmread(path, stop_before_pixels=True)
        if "ImagePositionPatient" in header or "PerFrameFunctionalGroupsSequence" in header:
            header.filename = str(path)
            series[str(header.SeriesInstanceUID)].append(header)
    return series


def find_series(files: list[Path]) -> list[str]:
    """The series of the DICOM `files`, each as its `{folder}/{uid}.dcmseries` name, where folder
    is the deepest one holding all its files."""
    found = image_headers(files) if files else {}
    names = []
    for uid, headers in sorted(found.items()):
        folder = Path(*Path(headers[0].filename).parent.parts)
        for header in headers[1:]:
            while folder not in Path(header.filename).parents:
                folder = folder.parent
        names.append(str(folder / f"{uid}{SERIES_ENDING}"))
    return names


@functools.lru_cache(maxsize=8)
def sorted_headers(series: str) -> list:
    """The headers of a series' slices in order along their normal; SeriesProblem says what
    keeps it from being one volume."""
    folder, uid = Path(series).parent, Path(series).name[: -len(SERIES_ENDING)]
    headers = image_headers(dicom_files(folder)).get(uid)
    name = f"series {uid} in {folder}"
    if not headers:
        raise SeriesProblem(f"{name}: no DICOM image files of it there")
    frames = max(int(getattr(h, "NumberOfFrames", 1) or 1) for h in headers)
    if frames > 1 or "PerFrameFunctionalGroupsSequence" in headers[0]:
        raise SeriesProblem(f"{name}: a multi-frame (enhanced) DICOM object of {frames} frames; segnet reads series "
                            "of single-frame slices: convert it, e.g. to NIfTI with dcm2niix")
    for field in ("ImageOrientationPatient", "Rows", "Columns", "PixelSpacing"):
        values = Counter(str(getattr(h, field, None)) for h in headers)
        if len(values) > 1:
            raise SeriesProblem(f"{name}: its slices differ in {field} ({', '.join(values)}); one volume needs one")
    orientation = np.asarray(headers[0].ImageOrientationPatient, np.float64)
    normal = np.cross(orientation[:3], orientation[3:])
    corners = np.asarray([h.ImagePositionPatient for h in headers], np.float64)
    positions = corners @ normal
    order = np.argsort(positions, kind="stable")
    headers, positions, corners = [headers[i] for i in order], positions[order], corners[order]
    spacing_problem(name, positions)
    # slices stacked along their normal; a gantry tilt shifts each within its plane: a sheared grid
    shift = corners[-1] - corners[0] - (positions[-1] - positions[0]) * normal
    if np.linalg.norm(shift) > SPACING_TOLERANCE * max(positions[-1] - positions[0], 1.0):
        raise SeriesProblem(f"{name}: a tilted (sheared) series, its last slice shifted {np.linalg.norm(shift):.2f} mm "
                            "within its plane from the first (gantry tilt): resample it, e.g. with dcm2niix")
    return headers


def spacing_problem(name: str, positions: np.ndarray) -> None:
    """Refuses slices (sorted positions along the normal, mm) that are not evenly spaced: two at
    one position, missing slices (a gap of a whole number of spacings), or any other gap."""
    if len(positions) < 2:
        return
    gaps = np.diff(positions)
    step = float(np.median(gaps))
    for i, gap in enumerate(gaps):
        where = f"between the slices at {positions[i]:.2f} and {positions[i + 1]:.2f} mm along the slice normal"
        if gap <= SPACING_TOLERANCE * max(step, 1e-6):
            raise SeriesProblem(f"{name}: two slices at {positions[i]:.2f} mm along the slice normal: keep one")
        if abs(gap - step) <= SPACING_TOLERANCE * step:
            continue
        missing = round(gap / step) - 1
        if missing >= 1 and abs(gap - (missing + 1) * step) <= SPACING_TOLERANCE * step:
            raise SeriesProblem(f"{name}: {missing} slice(s) missing {where} (a gap of {gap:.2f} mm, the others "
                                f"{step:.2f} mm): add them, or predict the series' parts separately")
        raise SeriesProblem(f"{name}: non-uniform slice spacing, a gap of {gap:.2f} mm {where} (the others "
                            f"{step:.2f} mm): resample the series to one spacing")


def series_problem(series: str) -> str | None:
    try:
        sorted_headers(series)
    except SeriesProblem as problem:
        return str(problem)
    return None


def series_files(series: str) -> list[str]:
    """The files of a series in slice order."""
    return [h.filename for h in sorted_headers(series)]


def source_datasets(series: str) -> list:
    """The series' slices in order, read whole: what a DICOM SEG references."""
    pydicom = extra_module("pydicom")
    return [pydicom.dcmread(path) for path in series_files(series)]
