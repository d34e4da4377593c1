"""Every input of a command checked before its first output is written: each file's header
(segnet.data.headers) and its data read through to the end, so that a scan cut short, or corrupt
inside its gzip stream, stops the command before it writes anything, or, where the user asks for
it (skip_broken=true), is named and left out while the other cases go on."""

from __future__ import annotations

import gzip
import logging
from collections.abc import Sequence
from pathlib import Path

from segnet.data.dataset_json import Case
from segnet.data.formats import is_itk, is_natural
from segnet.data.headers import header_problem, read_problem
from segnet.data.image_files import image_loader
from segnet.errors import DatasetError

log = logging.getLogger(__name__)
CHUNK = 2**24  # bytes of a gzip stream decompressed at a time: the check holds no more than that


def data_problem(path: str | Path) -> str | None:
    """Why the data of the file at `path` cannot be read to its end (None: it can). A gzip stream
    is decompressed through, its length and CRC checked, without keeping what it holds; a natural
    image, NRRD, MHA or DICOM series is read; an uncompressed NIfTI holds what its header needs
    (header_problem checks)."""
    try:
        if str(path).endswith(".gz"):
            with gzip.open(path, "rb") as stream:
                while stream.read(CHUNK):
                    pass
        elif is_natural(path) or is_itk(path):
            image_loader()(path)
    except Exception as error:  # any way a file's data can be broken
        return read_problem(path, error)
    return None


def case_problems(case: Case, max_voxels: int, channels: int) -> list[str]:
    """One line for each file of the case that cannot be read: its header first (nothing is read
    that a lying header would make huge), then its data."""
    problems = []
    for path in case.files:
        found = header_problem(path, max_voxels, channels if case.images == (path,) else None,
                               label=path == case.label)
        if found or (found := data_problem(path)):
            problems.append(found)
    return problems


def check_inputs(cases: Sequence[Case], max_voxels: int, channels: int, task: str = "predicted",
                 skip_broken: bool | None = None) -> list[Case]:
    """The cases to go on with: every case, or a DatasetError naming each bad file (nothing is
    written yet); with skip_broken, the cases whose files are all readable, the others named
    (None: a command that offers no such choice)."""
    problems = {case.name: found for case in cases if (found := case_problems(case, max_voxels, channels))}
    if not problems:
        return list(cases)
    lines = [line for found in problems.values() for line in found]
    if not skip_broken:
        choice = "" if skip_broken is None else " (skip_broken=true leaves their cases out and goes on with the others)"
        raise DatasetError(f"{len(lines)} input scan(s) cannot be {task}, nothing was written{choice}:\n"
                           + "\n".join(lines))
    log.warning("skip_broken=true: leaving out %d case(s) whose scans cannot be %s (%s):\n%s", len(problems), task,
                ", ".join(problems), "\n".join(lines))
    return [case for case in cases if case.name not in problems]
