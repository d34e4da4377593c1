"""What a scan's header claims, checked before anything is allocated from it.

A NIfTI header says how many voxels follow and on which grid; a broken or hostile one can claim
terabytes, a grid of zero or negative spacing, a singular affine or the wrong number of axes, and
an empty file, a folder or a stray non-image can sit among the inputs, and a file can hold less
than its header promises. Each is found here from the header (and the file's size, or what a
gzip stream can hold) and named in one line with the file; the data itself is read afterwards
by the loader, whose failures (a gzip stream that ends early, a corrupt one) are named in one
line too (`read_problem`, `loading`). A natural image's header (segnet.data.image_files) is
checked for what segnet cannot read in it (alpha, palettes), for its channels, and, for a label,
for being 8-bit grey. An NRRD or MHA header (SimpleITK's) is checked for its axes, voxels and
spacing; a DICOM series for being one volume (segnet.data.dicom_series).
"""

from __future__ import annotations

import math
from pathlib import Path

import nibabel as nib
import numpy as np

from segnet.data.formats import SERIES_ENDING, image_ending, is_itk, is_natural
from segnet.data.image_files import UnreadableFormat, sidecar_spacing, stored

MAX_VOXELS = 2**30  # data.max_voxels: a 1024^3 volume, 4 GiB in float32; raise it for larger real scans
NIFTI = (".nii", ".nii.gz")
MAX_DEFLATE_RATIO = 1032  # deflate's limit: a 258-byte match at distance 1 coded in 2 bits
# The empty gzip member that ends a BGZF file (samtools' blocked gzip): its trailer records 0 bytes.
BGZF_END = bytes.fromhex("1f8b08040000000000ff0600424302001b0003000000000000000000")


def header_problem(path: str | Path, max_voxels: int = MAX_VOXELS, channels: int | None = None,
                   label: bool = False) -> str | None:
    """What is wrong with the scan at `path` as its header says (None: nothing found); `channels`,
    where one file holds a case's channels, is the size a fourth axis may have; `label`: the file
    is a label map."""
    path = Path(path)
    if image_ending(path) == SERIES_ENDING:
        from segnet.data.dicom_series import series_problem

        return series_problem(str(path))
    if path.is_dir():
        return f"{path}: a folder, not an image file"
    if not path.is_file():
        return f"{path}: no such file"
    if path.stat().st_size == 0:
        return f"{path}: an empty file"
    if is_natural(path):
        return natural_problem(path, max_voxels, channels, label)
    if is_itk(path):
        return itk_problem(path, max_voxels, channels)
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
    needed = int(image.header.get_data_offset()) + voxels * image.get_data_dtype().itemsize
    if (short := shortfall(path, needed)) is not None:
        return f"{path}: {short} but its header needs {needed:,}: a truncated file"
    spacing = np.asarray(zooms[:3], dtype=np.float64)
    if not (np.isfinite(spacing).all() and (spacing > 0).all()):
        return f"{path}: voxel spacing {tuple(spacing.tolist())}; every spacing must be a positive number of mm"
    if not np.isfinite(affine).all() or abs(np.linalg.det(affine[:3, :3])) < 1e-12:
        return f"{path}: its affine is singular or not finite; the scan's geometry cannot be trusted"
    return None


def itk_problem(path: Path, max_voxels: int, channels: int | None) -> str | None:
    """What is wrong with an NRRD or MHA file as its header says: not 3D, more components than the
    case's channels, too many voxels, a spacing that is not positive."""
    from segnet.data.itk_files import header

    try:
        reader = header(path)
    except RuntimeError as error:  # ITK's reader: an unknown or broken header
        return f"{path}: not a readable image ({str(error).strip().splitlines()[-1][:160]})"
    size, components = reader.GetSize(), reader.GetNumberOfComponents()
    if len(size) != 3:
        return f"{path}: a {len(size)}D image; a 3D volume is expected"
    if components not in (1, channels):
        return f"{path}: {components} components per voxel; {channels or 1} channel(s) expected"
    if (voxels := math.prod(size)) > max_voxels:
        return (f"{path}: its header claims {voxels:,} voxels {tuple(size)}, more than "
                f"data.max_voxels={max_voxels:,}; raise data.max_voxels if the scan is really that large")
    if not all(np.isfinite(s) and s > 0 for s in reader.GetSpacing()):
        return f"{path}: voxel spacing {reader.GetSpacing()}; every spacing must be a positive number of mm"
    return None


def natural_problem(path: Path, max_voxels: int, channels: int | None, label: bool) -> str | None:
    """What is wrong with a natural image as its header says: a pixel kind segnet does not read,
    too many pixels, channels other than the case needs, or a label that is not 8-bit grey."""
    try:
        header = stored(path)
        sidecar_spacing(path, len(header.size))
    except UnreadableFormat as error:
        return f"{path}: {error}"
    except Exception as error:  # any way a file can be broken
        return f"{path}: not a readable image ({type(error).__name__}: {str(error).splitlines()[0][:160]})"
    pixels = math.prod(header.size)
    if pixels > max_voxels:
        return (f"{path}: {pixels:,} pixels {header.size}, more than data.max_voxels={max_voxels:,}; raise "
                "data.max_voxels if the image is really that large")
    if label and header.channels != 1:
        return (f"{path}: a label with {header.channels} channels ({header.kind}); labels are 8-bit grey "
                "images holding the class values 0..K-1, not colours")
    if label and header.integer_bits not in (1, 8):
        kind = f"a {header.integer_bits}-bit" if header.integer_bits else "a floating-point"
        return (f"{path}: {kind} label ({header.kind}); labels are 8-bit grey images holding the class "
                "values 0..K-1: save it as 8-bit")
    expected = 1 if label else channels or 1
    if header.channels != expected:
        return (f"{path}: holds {header.channels} channel(s) ({header.kind}) but the case needs {expected} "
                "from it: dataset.json's channel_names count the channels of a case's files together")
    return None


def shortfall(path: Path, needed: int) -> str | None:
    """How the file is shorter than the `needed` bytes, where that can be told without reading
    it: its size, or for gzip what its stream can hold. The gzip trailer records the size
    modulo 2^32, so it is trusted only for a need below 4 GiB; deflate expands a byte into at
    most MAX_DEFLATE_RATIO, so a stream too short for the need is truncated whatever its trailer
    says. None: not short, or not to be told cheaply (reading it tells)."""
    size = path.stat().st_size
    if not path.name.endswith(".gz"):
        return f"holds {size:,} bytes" if size < needed else None
    if size * MAX_DEFLATE_RATIO < needed:
        return f"is a gzip stream of {size:,} bytes, which holds at most {size * MAX_DEFLATE_RATIO:,} uncompressed,"
    with open(path, "rb") as f:
        f.seek(-min(size, len(BGZF_END)), 2)
        end = f.read()
    if needed >= 2**32 or end == BGZF_END:  # the size wrapped, or the trailer is an empty last member's
        return None
    recorded = int.from_bytes(end[-4:], "little")
    return f"holds {recorded:,} bytes of image" if recorded < needed else None


def read_problem(path: str | Path, error: Exception) -> str:
    """The one line naming a file that its reader could not read, and why."""
    reason = str(error).splitlines()[0][:200] if str(error) else ""
    if isinstance(error, EOFError):
        reason += ": the file ends early (truncated)"
    return f"{path}: cannot be read ({type(error).__name__}: {reason})"
