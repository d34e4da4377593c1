"""Scans that lie: every broken header is named in one line with its file before anything is
allocated from it, and randomly corrupted files give a correct read or that one line, never a
traceback, a crash or a hang."""

from __future__ import annotations

import dataclasses
import gzip
import signal
import struct
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from helpers.commands import run_command
from helpers.data import sphere_case, write_decathlon
from segnet.data.dataset_json import describe_dataset
from segnet.data.headers import header_problem
from segnet.errors import DatasetError
from segnet.planning.integrity import verify_dataset

DIM_OFFSET, PIXDIM_OFFSET = 40, 76  # NIfTI-1: dim[8] int16, pixdim[8] float32


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
                verify_dataset(description, description.labelled)
                outcomes["read"] += 1
            except DatasetError as error:
                assert str(target) in str(error)
                outcomes["one line"] += 1
            finally:
                signal.alarm(0)
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert outcomes["read"] > 0 and outcomes["one line"] > 0  # both outcomes happened: the flips mattered
