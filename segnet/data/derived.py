"""Files derived from a dataset's sources, kept between runs (the preprocessed cache, the
fingerprint record): where they live, and what made them, so that none is read once that changed.

What made a derived file is (1) the source files, each by its path, size, modification and
status-change times and inode (a rewrite, `cp -p`, a `tar` or `rsync -t` restore changes the
status-change time even where it keeps the size and modification time), and by its content too
where it was written so shortly before it was stamped that a coarse clock could miss the next
change (git's "racily clean" entries); and (2) the code that made it: the source of segnet's
modules on that path and the versions of the libraries whose behaviour it relies on.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import sys
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from segnet.data.dataset_json import Case

DEFAULT_ROOT = "~/.cache/segnet/preprocessed"
RACY_NS = 2 * 10**9  # FAT keeps modification times to 2 s, some network file systems to 1 s


def cache_root(cache_dir: str | None) -> Path:
    """data.cache_dir, else $SEGNET_PREPROCESSED, else ~/.cache/segnet/preprocessed."""
    return Path(cache_dir or os.environ.get("SEGNET_PREPROCESSED") or DEFAULT_ROOT).expanduser()


def digest(value: Any, length: int = 12) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:length]


def dataset_folder(root: Path, dataset_root: Path) -> Path:
    """The folder of one dataset's derived files under the cache root, named after the dataset's
    real path (a link to it is the same dataset)."""
    dataset_root = Path(dataset_root).resolve()
    return root / f"{dataset_root.name}-{digest(str(dataset_root), 8)}"


def file_digest(path: str | Path) -> str:
    content = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(2**20):
            content.update(chunk)
    return content.hexdigest()


def source_stamp(path: str | Path) -> dict[str, Any]:
    """What identifies one source file as it is now."""
    stat = os.stat(path)
    stamp = {"path": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "ctime_ns": stat.st_ctime_ns,
             "inode": stat.st_ino}
    if time.time_ns() - max(stat.st_mtime_ns, stat.st_ctime_ns) < RACY_NS:
        stamp["sha256"] = file_digest(path)
    return stamp


def is_unchanged(stamp: dict[str, Any]) -> bool:
    """Whether the file a stamp names is still the file it was stamped as."""
    try:
        stat = os.stat(stamp["path"])
    except OSError:
        return False
    same = (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino) == (
        stamp["size"], stamp["mtime_ns"], stamp["ctime_ns"], stamp["inode"])
    return same and ("sha256" not in stamp or file_digest(stamp["path"]) == stamp["sha256"])


def case_stamps(case: Case) -> list[dict[str, Any]]:
    """The stamp of each source file of a case, taken before the files are read."""
    return [source_stamp(path) for path in case.files]


def case_unchanged(case: Case, stamps: Sequence[dict[str, Any]]) -> bool:
    """Whether `stamps` were taken of this case's files as they are now."""
    return [s["path"] for s in stamps] == case.files and all(map(is_unchanged, stamps))


@functools.cache
def code_version(modules: tuple[str, ...], libraries: tuple[str, ...]) -> dict[str, Any]:
    """The version of a code path: a digest of the source of segnet's `modules` on it, and the
    installed version of each of `libraries` (None where one is not installed)."""
    sources = hashlib.sha256()
    for name in modules:
        sources.update(Path(importlib.util.find_spec(name).origin).read_bytes())
    return {"segnet": sources.hexdigest()[:16], "libraries": {name: library_version(name) for name in libraries}}


def library_version(name: str) -> str | None:
    """The installed version of a library (None: not installed); an imported one's own
    __version__, which costs nothing, else its distribution's."""
    loaded = getattr(sys.modules.get(name), "__version__", None)
    if loaded is not None:
        return str(loaded)
    if importlib.util.find_spec(name) is None:
        return None
    for distribution in [name, *import_names_to_distributions().get(name, [])]:  # skimage: scikit-image
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return None


@functools.cache
def import_names_to_distributions() -> dict[str, list[str]]:
    return metadata.packages_distributions()
