"""A dataset's fingerprint and integrity check, made once and kept beside its preprocessed cache
(as nnU-Net plans once per dataset), so that a run, a fold or a sweep job that starts on a
dataset already checked reads one file and stats the sources instead of reading every image:

    <cache root>/<dataset>-<hash of its path>/fingerprint-<key>/
        fingerprint.json         per case: its sources' stamps, its problems, its fingerprint
                                 entry; and the dataset's foreground intensities
        <case>.intensities.npy   the case's sampled foreground intensities, (channels, samples)

The key covers what the check and the fingerprint depend on: the code that makes them (segnet's
modules, MONAI, nibabel, numpy), the dataset's channels and classes, and data.max_voxels. A case
whose sources changed (segnet.data.derived), and a case added, are read again, alone; a broken
case keeps its problems until its files change, so every process that starts on it fails with
the same message at once. Any process may bring the record up to date, under a lock of its
own: the first builds, the others wait and then read, whatever started them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from segnet.data.dataset_json import Case, DatasetDescription
from segnet.data.derived import cache_root, case_stamps, case_unchanged, code_version, dataset_folder, digest
from segnet.data.headers import MAX_VOXELS
from segnet.data.image_files import image_loader
from segnet.files import atomic_path, exclusive, write_json
from segnet.planning.fingerprint import case_fingerprint, summarize
from segnet.planning.integrity import check_case, duplicates, raise_problems
from segnet.progress import bar

log = logging.getLogger(__name__)
CHECK_CODE = ("segnet.data.dataset_json", "segnet.data.formats", "segnet.data.headers", "segnet.data.image_files",
              "segnet.data.cropping", "segnet.planning.integrity", "segnet.planning.fingerprint",
              "segnet.planning.record")
CHECK_LIBRARIES = ("monai", "nibabel", "numpy", "PIL", "tifffile", "scipy", "skimage")
RECORD = "fingerprint.json"


def record_folder(description: DatasetDescription, cache_dir: str | None, max_voxels: int) -> Path:
    key = {"code": code_version(CHECK_CODE, CHECK_LIBRARIES), "max_voxels": max_voxels,
           "channels": list(description.channel_names), "classes": list(description.class_names),
           "ignore_label": description.ignore_label}
    return dataset_folder(cache_root(cache_dir), description.root) / f"fingerprint-{digest(key)}"


def read_record(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / RECORD).read_text())
    except (OSError, ValueError):
        return {"cases": {}}


def stale_cases(record: dict[str, Any], cases: tuple[Case, ...]) -> list[Case]:
    recorded = record["cases"]
    return [c for c in cases if c.name not in recorded or not case_unchanged(c, recorded[c.name]["sources"])]


def is_current(record: dict[str, Any], cases: tuple[Case, ...]) -> bool:
    return "foreground_intensities" in record and set(record["cases"]) == {c.name for c in cases} \
        and not stale_cases(record, cases)


def check_and_fingerprint(case: Case, load: Callable, description: DatasetDescription, max_voxels: int,
                          folder: Path) -> dict[str, Any]:
    """One case's record: read and checked now, its intensities written beside the record."""
    sources = case_stamps(case)  # before reading, so a change while it is read is seen next time
    loaded, problems = check_case(case, load, description, max_voxels)
    entry = None
    if loaded is not None:
        entry, samples = case_fingerprint(case, loaded, description)
        with atomic_path(folder / f"{case.name}.intensities.npy") as temporary:
            np.save(temporary, samples)
    return {"sources": sources, "problems": problems, "fingerprint": entry}


def update(folder: Path, record: dict[str, Any], description: DatasetDescription, max_voxels: int) -> dict:
    cases = description.labelled
    stale = stale_cases(record, cases)
    log.info("fingerprint and integrity check of %d of %d case(s) of %s", len(stale), len(cases), description.root)
    load = image_loader()
    fresh = {case.name: check_and_fingerprint(case, load, description, max_voxels, folder)
             for case in bar(stale, "checking", "case")}
    per_case = {case.name: fresh.get(case.name) or record["cases"][case.name] for case in cases}
    sound = [case.name for case in cases if per_case[case.name]["fingerprint"] is not None]
    samples = [np.load(folder / f"{name}.intensities.npy") for name in sound]
    summary = summarize(description, [per_case[name]["fingerprint"] for name in sound], samples)
    record = {"cases": per_case, "foreground_intensities": summary["foreground_intensities"]}
    write_json(folder / RECORD, record)
    return record


def dataset_fingerprint(description: DatasetDescription, cache_dir: str | None = None,
                        max_voxels: int = MAX_VOXELS) -> dict[str, Any]:
    """The fingerprint of the dataset's labelled cases, from the record where it is current (the
    cases read now where not); a DatasetError listing every problem if the dataset is broken."""
    cases = description.labelled
    folder = record_folder(description, cache_dir, max_voxels)
    record = read_record(folder)
    if not is_current(record, cases):
        folder.mkdir(parents=True, exist_ok=True)
        with exclusive(folder / ".lock"):
            record = read_record(folder)  # another process may have brought it up to date meanwhile
            if not is_current(record, cases):
                record = update(folder, record, description, max_voxels)
    problems = duplicates(cases) + [f"case {c.name}: {p}" for c in cases for p in record["cases"][c.name]["problems"]]
    raise_problems(description, problems)
    return {"cases": [record["cases"][c.name]["fingerprint"] for c in cases],
            "foreground_intensities": record["foreground_intensities"]}
