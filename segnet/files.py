"""Files written whole or not at all: what something later reads (plans, splits, metrics, reports,
label maps, exports, the preprocessed cache, plots) is written under a temporary name beside its
target and renamed over it, so a crash, a kill or a reader at the wrong moment sees the previous
file or the new one, never half of one. (Checkpoints do the same, flushed to disk too:
segnet.checkpoints.writing.)"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _temporary_beside(path: Path) -> Path:
    # The full ending kept (.nii.gz, .png, .pt2): writers choose the format by it. The process
    # and thread in the name keep concurrent writers of one target apart.
    stem, dot, ending = path.name.partition(".")
    return path.with_name(f".{stem}.{os.getpid()}-{threading.get_ident()}.tmp{dot}{ending}")


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path to write `path`'s content to; renamed over `path` when the block ends
    without an error, removed when it does not."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = _temporary_beside(path)
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def remove_temporaries(folder: str | Path) -> list[Path]:
    """Deletes what killed writers left in `folder` (their temporary files; the targets they were
    writing were never touched). Only for a folder no other process is writing to."""
    left = sorted(Path(folder).glob(".*.tmp*"))
    for path in left:
        path.unlink(missing_ok=True)
    return left


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as temporary:
        temporary.write_text(text)


def write_json(path: str | Path, value: Any) -> None:
    write_text(path, json.dumps(value, indent=2) + "\n")


@contextlib.contextmanager
def exclusive(lock_file: Path) -> Iterator[None]:
    """An exclusive lock held by this process until the block ends (released if it dies)."""
    with open(lock_file, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
