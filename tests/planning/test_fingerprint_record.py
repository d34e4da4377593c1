"""The dataset's fingerprint and integrity check, made once per dataset (segnet.planning.record):
a later run, fold or job reads no image, a changed case is read again alone, a broken case stops
every start with the same message, and of processes starting together one reads the dataset."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from helpers.data import write_decathlon
from helpers.training import compose_config
from segnet.data.dataset_json import describe_dataset
from segnet.errors import DatasetError
from segnet.planning import record
from segnet.planning.plan import plan_for_run


@pytest.fixture
def description(tmp_path):
    return describe_dataset(str(write_decathlon(tmp_path / "Task", cases=3)))


def read_cases(monkeypatch, seconds: float = 0.0) -> list[str]:
    """The names of the cases read (checked and fingerprinted) from now on, each taking `seconds`."""
    read = []
    original = record.check_case

    def counting(case, *args):
        read.append(case.name)
        time.sleep(seconds)
        return original(case, *args)

    monkeypatch.setattr(record, "check_case", counting)
    return read


def test_a_run_on_a_checked_dataset_reads_no_image(description, monkeypatch, tmp_path):
    read = read_cases(monkeypatch)
    overrides = ["data=folder", f"data.root={description.root}", "model.channels=[8,16]", "model.strides=[2]"]
    plans = [plan_for_run(compose_config(overrides), tmp_path / f"run{i}") for i in range(2)]  # two run folders
    assert sorted(read) == ["case_000", "case_001", "case_002"]  # by the first alone
    assert plans[0] == plans[1]


def test_a_changed_case_is_read_again_alone(description, monkeypatch):
    first = record.dataset_fingerprint(description)
    read = read_cases(monkeypatch)
    changed = description.labelled[1]
    stored = nib.load(changed.images[0])
    nib.save(nib.Nifti1Image(np.asarray(stored.dataobj) * 3, stored.affine), changed.images[0])
    again = record.dataset_fingerprint(description)
    assert read == [changed.name]
    assert again["cases"] == first["cases"]  # the same grids and classes
    assert again["foreground_intensities"][0]["mean"] > first["foreground_intensities"][0]["mean"]


def test_a_broken_case_stops_every_start_with_the_same_message(description, monkeypatch):
    broken = description.labelled[2]
    stored = nib.load(broken.label)
    label = np.asarray(stored.dataobj).copy()
    label[0, 0, 0] = 9
    nib.save(nib.Nifti1Image(label, stored.affine), broken.label)
    with pytest.raises(DatasetError) as first:
        record.dataset_fingerprint(description)
    read = read_cases(monkeypatch)
    with pytest.raises(DatasetError) as again:
        record.dataset_fingerprint(description)
    assert read == [] and str(again.value) == str(first.value)
    assert f"case {broken.name}: {broken.label}: label values 9 are not classes" in str(first.value)


def test_of_processes_starting_together_one_reads_the_dataset(description, monkeypatch):
    read = read_cases(monkeypatch, seconds=0.2)  # long enough for the others to start meanwhile
    results = [None] * 3

    def start(index: int) -> None:
        results[index] = record.dataset_fingerprint(description)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(3)]  # each its own lock handle
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(read) == ["case_000", "case_001", "case_002"]
    assert results[0] is not None and results[0] == results[1] == results[2]
    assert not [p for p in Path(record.record_folder(description, None, 2**30)).iterdir() if ".tmp" in p.name]
