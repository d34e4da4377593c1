"""What a scan's header claims, checked before anything is allocated from it.

A NIfTI header says how many voxels follow and on which grid; a broken or hostile one can claim
terabytes, a grid of zero or negative spacing, a singular affine or the wrong number of axes, and
an empty file, a folder or a stray non-image can sit among the inputs, and a file can hold less
than its header promises. Each is found here from the header (and the file's size, or a gzip
trailer's) and named in one line with the file; the data itself is read afterwards by the
loader, whose failures (a truncated or corrupt gzip) the callers name in one line too. Formats
other than NIfTI are left to their readers.
"""

from __future__ import annotations

import math
from pathlib import Path

import nibabel as nib
import numpy as np

MAX_VOXELS = 2**30  # data.max_voxels: a 1024^3 volume, 4 GiB in float32; raise it for larger real scans
NIFTI = (".nii", ".nii.gz")


def header_problem(path: str | Path, max_voxels: int = MAX_VOXELS, channels: int | None = None) -> str | None:
    """What is wrong with the scan at `path` as its header says (None: nothing found); `channels`,
    where one file holds a case's channels, is the size a fourth axis may have."""
    path = Path(path)
    if path.is_dir():
        return f"{path}: a folder, not an image file"
    if not path.is_file():
        return f"{path}: no such file"
    if path.stat().st_size == 0:
        return f"{path}: an empty file"
    if not path.name.endswith(NIFTI):
        return None
    try:
        image = nib.load(path)  # the header only
        with nib.openers.ImageOpener(path) as f:  # as stored: nibabel quietly turns a zero spacing into 1
            zooms = type(image.header).from_fileobj(f, check=False).get_zooms()
        shape, affine = image.shape, image.affine
    except Exception as error:  # any way a header can be broken
        return f"{path}: not a readable NIfTI file ({type(error).__name__}: {str(error).splitlines()[0][:160]})"
    if len(shape) < 3:
        return (f"{path}: a {len(shape)}D image; a 3D volume is expected (a 2D model trains on a volume's slices: "
                "store a single slice as shape (H, W, 1))")
    if len(shape) > 4 or (len(shape) == 4 and shape[3] not in (1, channels)):
        return f"{path}: shape {tuple(shape)}; a 3D volume is expected (or one axis of {channels or 1} channel(s))"
    voxels = math.prod(int(s) for s in shape)
    if voxels > max_voxels:
        return (f"{path}: its header claims {voxels:,} voxels {tuple(shape)}, more than "
                f"data.max_voxels={max_voxels:,}; raise data.max_voxels if the scan is really that large")
    stored, needed = stored_bytes(path), int(image.header.get_data_offset()) + voxels * image.get_data_dtype().itemsize
    if stored is not None and stored < needed:
        return f"{path}: holds {stored:,} bytes of image but its header needs {needed:,}: a truncated file"
    spacing = np.asarray(zooms[:3], dtype=np.float64)
    if not (np.isfinite(spacing).all() and (spacing > 0).all()):
        return f"{path}: voxel spacing {tuple(spacing.tolist())}; every spacing must be a positive number of mm"
    if not np.isfinite(affine).all() or abs(np.linalg.det(affine[:3, :3])) < 1e-12:
        return f"{path}: its affine is singular or not finite; the scan's geometry cannot be trusted"
    return None


def stored_bytes(path: Path) -> int | None:
    """The bytes a NIfTI file holds once uncompressed: its size, or for gzip the size its trailer
    records (modulo 2^32, so only trusted below that); None when it cannot be told cheaply."""
    if not path.name.endswith(".gz"):
        return path.stat().st_size
    with open(path, "rb") as f:
        f.seek(-4, 2)
        recorded = int.from_bytes(f.read(4), "little")
    return recorded if path.stat().st_size < 2**32 // 4 else None
