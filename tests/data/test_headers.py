"""Scans that lie: every broken header is named in one line with its file before anything is
allocated from it, and randomly corrupted files give a correct read or that one line, never a
traceback, a crash or a hang."""

from __future__ import annotations

import dataclasses
import gzip
import signal
import struct
import zlib
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from helpers.commands import run_command
from helpers.data import CLASS_NAMES, sphere_case, write_decathlon
from segnet.data.dataset_json import describe_dataset
from segnet.data.headers import header_problem
from segnet.data.transforms import eval_transforms, load_case
from segnet.errors import DatasetError
from segnet.evaluation.evaluator import score_case
from segnet.planning.record import dataset_fingerprint
from segnet.preprocessing.preprocess import preprocess

DIM_OFFSET, PIXDIM_OFFSET = 40, 76  # NIfTI-1: dim[8] int16, pixdim[8] float32
GEOMETRY = {"orientation": "RAS", "spacing": None, "normalization": None}


def patched(source: Path, target: Path, offset: int, fmt: str, *values) -> Path:
    """A copy of an uncompressed NIfTI file with header bytes at `offset` replaced."""
    data = bytearray(source.read_bytes())
    struct.pack_into(fmt, data, offset, *values)
    target.write_bytes(bytes(data))
    return target


@pytest.fixture
def valid(tmp_path) -> Path:
    image, _ = sphere_case(shape=(8, 9, 10))
    path = tmp_path / "valid.nii"
    nib.save(nib.Nifti1Image(image, np.diag([0.8, 0.8, 2.0, 1.0])), path)
    return path


def lies(valid: Path, folder: Path) -> dict[str, tuple[Path, str]]:
    """Broken scans, each with what its one line must say."""
    folder.mkdir()
    singular = nib.load(valid)
    singular.set_sform(np.zeros((4, 4)), code=1)
    singular.set_qform(None, code=0)
    nib.save(singular, folder / "singular.nii")
    nib.save(nib.Nifti1Image(np.zeros((6, 7), np.float32), np.eye(4)), folder / "flat.nii")
    nib.save(nib.Nifti1Image(np.zeros((4, 4, 4, 3), np.float32), np.eye(4)), folder / "four.nii")
    (folder / "empty.nii.gz").write_bytes(b"")
    (folder / "notes.nii.gz").write_text("not an image at all\n")
    (folder / "folder.nii.gz").mkdir()
    whole = gzip.compress(valid.read_bytes())
    (folder / "truncated.nii.gz").write_bytes(whole[: len(whole) // 3])
    return {
        "huge": (patched(valid, folder / "huge.nii", DIM_OFFSET, "<8h", 3, 4000, 4000, 4000, 1, 1, 1, 1),
                 "claims 64,000,000,000 voxels"),
        "zero spacing": (patched(valid, folder / "zero.nii", PIXDIM_OFFSET + 4, "<f", 0.0), "voxel spacing (0.0"),
        "nan spacing": (patched(valid, folder / "nan.nii", PIXDIM_OFFSET + 8, "<f", float("nan")), "voxel spacing"),
        "singular": (folder / "singular.nii", "affine is singular"),
        "2D": (folder / "flat.nii", "a 2D image; a 3D volume is expected"),
        "4D": (folder / "four.nii", "shape (4, 4, 4, 3); a 3D volume is expected"),
        "empty": (folder / "empty.nii.gz", "an empty file"),
        "not an image": (folder / "notes.nii.gz", "not a readable NIfTI file"),
        "folder": (folder / "folder.nii.gz", "a folder, not an image file"),
    }


def test_each_lie_is_named_in_one_line(valid, tmp_path):
    assert header_problem(valid) is None
    for what, (path, expected) in lies(valid, tmp_path / "lies").items():
        problem = header_problem(path)
        assert problem is not None and problem.startswith(f"{path}: ") and expected in problem, (what, problem)
        assert "\n" not in problem
    assert header_problem(tmp_path / "lies" / "huge.nii", max_voxels=10**11) is not None  # then its data is short
    assert "3D volume" not in (header_problem(tmp_path / "lies" / "four.nii", channels=3) or "")


def test_the_integrity_check_names_a_truncated_gzip_and_a_lying_header(valid, tmp_path):
    root = write_decathlon(tmp_path / "Task", cases=3)
    lied = lies(valid, tmp_path / "lies")
    (root / "imagesTr" / "case_000.nii.gz").write_bytes((tmp_path / "lies" / "truncated.nii.gz").read_bytes())
    (root / "imagesTr" / "case_001.nii.gz").write_bytes(gzip.compress(lied["huge"][0].read_bytes()))
    result = run_command("segnet-plan", "--verify", f"data.root={root}", f"hydra.run.dir={tmp_path / 'h'}")
    assert result.returncode == 1
    message = result.stderr.strip().splitlines()
    assert message[0].startswith("error: ") and "has 2 problem(s)" in message[0]
    assert any("case_000.nii.gz: cannot be read" in line for line in message)
    assert any("case_001.nii.gz: its header claims 64,000,000,000 voxels" in line for line in message)
    assert "Traceback" not in result.stderr


class Hung(Exception):
    pass


def _alarm(signum, frame):
    raise Hung


@pytest.mark.parametrize("ending", [".nii", ".nii.gz"])
def test_random_corruption_gives_a_read_or_one_line(tmp_path, ending):
    described = describe_dataset(str(write_decathlon(tmp_path / "Task", cases=1)))
    case = described.training[0]
    target = tmp_path / f"fuzzed{ending}"  # the case's image, stored with this ending
    stored = nib.load(case.images[0])
    nib.save(nib.Nifti1Image(np.asarray(stored.dataobj), stored.affine), target)
    description = dataclasses.replace(described, training=(dataclasses.replace(case, images=(str(target),)),))
    clean = target.read_bytes()
    rng = np.random.default_rng(0)
    outcomes = {"read": 0, "one line": 0}
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        for _ in range(150):
            data = bytearray(clean)
            # half the flips in the header (the first 352 bytes, or the gzip stream's start), half anywhere
            limit = 352 if rng.random() < 0.5 else len(data)
            for position in rng.integers(0, limit, size=rng.integers(1, 9)):
                data[position] = int(rng.integers(0, 256))
            target.write_bytes(bytes(data))
            signal.alarm(20)
            try:
                dataset_fingerprint(description)
                outcomes["read"] += 1
            except DatasetError as error:
                assert str(target) in str(error)
                outcomes["one line"] += 1
            finally:
                signal.alarm(0)
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert outcomes["read"] > 0 and outcomes["one line"] > 0  # both outcomes happened: the flips mattered


def zeros_gzip(path: Path, head: bytes, zeros: int, chunk: int = 2**26) -> Path:
    """A complete gzip file of `head` and then `zeros` zero bytes (a multiple of `chunk`), made in a
    few seconds: after a full flush a deflate stream refers to nothing before it, so one chunk's
    compressed bytes repeated are the stream of every chunk."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    start = deflate.compress(head) + deflate.flush(zlib.Z_FULL_FLUSH)
    block = deflate.compress(bytes(chunk)) + deflate.flush(zlib.Z_FULL_FLUSH)
    end = deflate.flush(zlib.Z_FINISH)
    crc = zlib.crc32(head)
    for _ in range(zeros // chunk):
        crc = zlib.crc32(bytes(chunk), crc)
    with open(path, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + start)
        for _ in range(zeros // chunk):
            f.write(block)
        f.write(end + struct.pack("<II", crc, (len(head) + zeros) % 2**32))
    return path


def test_a_complete_gzip_past_4_gib_is_whole_and_a_cut_one_truncated(tmp_path):
    header = nib.Nifti1Header()
    header.set_data_shape((1024, 1024, 1024))  # 2^30 voxels: data.max_voxels itself
    header.set_data_dtype(np.float32)
    header.set_data_offset(352)
    header.set_qform(np.eye(4), 1)
    head = header.binaryblock + bytes(4)  # 348 header bytes, no extensions
    small = zeros_gzip(tmp_path / "small.gz", head, 2 * 2**20, chunk=2**20)
    assert gzip.decompress(small.read_bytes()) == head + bytes(2 * 2**20)  # the construction is a real gzip
    large = zeros_gzip(tmp_path / "large.nii.gz", head, 4 * 2**30)
    assert large.stat().st_size < 5 * 2**20 and int.from_bytes(large.read_bytes()[-4:], "little") == 352
    assert header_problem(large) is None
    cut = tmp_path / "cut.nii.gz"
    cut.write_bytes(large.read_bytes()[: large.stat().st_size // 3])
    problem = header_problem(cut)
    assert problem is not None and problem.startswith(f"{cut}: ") and problem.endswith("a truncated file")


def test_a_gzip_stream_that_ends_early_is_one_line_wherever_it_is_read(tmp_path):
    root = write_decathlon(tmp_path / "Task", cases=2)
    description = describe_dataset(str(root))
    case = description.training[0]
    whole = Path(case.images[0]).read_bytes()
    # cut to a third, its last four bytes a trailer that claims enough: only reading finds it short
    Path(case.images[0]).write_bytes(whole[: len(whole) // 3] + struct.pack("<I", 2**32 - 1))
    label_file = tmp_path / "label.nii.gz"
    whole_label = Path(case.label).read_bytes()
    label_file.write_bytes(whole_label[: len(whole_label) // 3] + struct.pack("<I", 2**32 - 1))
    assert header_problem(case.images[0]) is None and header_problem(label_file) is None
    expected = f"{case.images[0]}: cannot be read (EOFError: "
    errors = []
    for read in (lambda: dataset_fingerprint(description),  # the integrity check
                 lambda: preprocess(description, [case], GEOMETRY, str(tmp_path / "cache")),
                 lambda: load_case(eval_transforms(False, **GEOMETRY), {"image": case.images[0]}),  # prediction
                 lambda: score_case(np.zeros((20, 24, 16), np.uint8), str(label_file), list(CLASS_NAMES))):
        with pytest.raises(DatasetError) as caught:
            read()
        errors.append(str(caught.value))
    assert f"\n  - case {case.name}: {expected}" in errors[0]  # one line among the dataset's problems
    assert errors[1].startswith(expected) and errors[2].startswith(expected)
    assert errors[3].startswith(f"{label_file}: cannot be read (EOFError: ")
    assert all("ends early (truncated)" in error for error in errors)
    assert not any("\n" in error for error in errors[1:])
