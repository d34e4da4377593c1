"""The preprocessed cache of a dataset under one plan, as nnU-Net keeps its preprocessed folder.

    <cache_dir>/<dataset>-<hash of its path>/<key of the loading plan>/
        loading.json           the plan entries the arrays depend on (orientation, spacing, normalization)
        <case>.image.npy       float32 (channels, *spatial): what evaluation's loading chain gives
        <case>.label.npy       the smallest unsigned integer type that holds the labels, (1, *spatial)
        <case>.foreground.npy  int32 (K, 1 + 3): sampled voxels of each foreground class, (class, x, y, z)
        <case>.json            properties: source files, shape, spacing, affine; written last, so a
                               case is complete exactly when its .json exists and names the sources
                               as they are now

A changed plan gives another key, so another folder; a changed or added case is found by its
sources' size and modification time and done again. Every file is written under a temporary name
and renamed, and a case is built under an exclusive lock on its own lock file: several processes
(ranks, SLURM tasks, folds) starting on an empty cache build each case once and never read half a
file.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from segnet.data.dataset_json import Case
from segnet.files import atomic_path, write_json

FORMAT = 1  # bump when what a case's files hold changes: old caches are then never read
FOREGROUND_SAMPLES = 10_000  # voxels kept per class for foreground-aware crops (nnU-Net's)
DEFAULT_ROOT = "~/.cache/segnet/preprocessed"


def cache_root(cache_dir: str | None) -> Path:
    """data.cache_dir, else $SEGNET_PREPROCESSED, else ~/.cache/segnet/preprocessed."""
    return Path(cache_dir or os.environ.get("SEGNET_PREPROCESSED") or DEFAULT_ROOT).expanduser()


def loading_plan(orientation: str, spacing: Sequence[float] | None, normalization: Sequence[dict] | None) -> dict:
    """What the preprocessed arrays depend on, as the cache keys it."""
    return {"format": FORMAT, "orientation": orientation, "spacing": None if spacing is None else list(spacing),
            "normalization": None if normalization is None else [dict(n) for n in normalization]}


def _digest(value: Any, length: int = 12) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:length]


def cache_folder(root: Path, dataset_root: Path, plan: dict) -> Path:
    dataset_root = Path(dataset_root).resolve()
    return root / f"{dataset_root.name}-{_digest(str(dataset_root), 8)}" / _digest(plan)


def source_stamps(case: Case) -> list[dict[str, Any]]:
    """Each source file of a case with its size and modification time: a changed file changes them."""
    stamps = []
    for path in (*case.images, *([case.label] if case.label else [])):
        stat = os.stat(path)
        stamps.append({"path": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns})
    return stamps


def label_dtype(largest: int) -> np.dtype:
    return np.dtype(np.uint8 if largest <= np.iinfo(np.uint8).max else np.uint16)


def sample_foreground(label: np.ndarray, name: str, samples: int = FOREGROUND_SAMPLES) -> np.ndarray:
    """Up to `samples` voxels of each foreground class (seeded by the case name, so reproducible)."""
    rng = np.random.default_rng(int(hashlib.sha256(name.encode()).hexdigest()[:8], 16))
    spatial = label[0]
    rows = []
    for value in np.unique(spatial):
        if value == 0:
            continue
        where = np.argwhere(spatial == value)
        if len(where) > samples:
            where = where[rng.choice(len(where), samples, replace=False)]
        rows.append(np.concatenate([np.full((len(where), 1), value), where], axis=1))
    return (np.concatenate(rows) if rows else np.zeros((0, 1 + spatial.ndim))).astype(np.int32)


@contextlib.contextmanager
def exclusive(lock_file: Path) -> Iterator[None]:
    """An exclusive lock held by this process until the block ends (released if it dies)."""
    with open(lock_file, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass(frozen=True)
class PreprocessedCase:
    """Where one case's arrays lie, and its properties."""

    folder: Path
    name: str

    def path(self, kind: str) -> Path:
        return self.folder / f"{self.name}.{kind}.npy"

    @property
    def properties_path(self) -> Path:
        return self.folder / f"{self.name}.json"

    def properties(self) -> dict[str, Any]:
        return json.loads(self.properties_path.read_text())

    def image(self, mmap: bool = True) -> np.ndarray:
        return np.load(self.path("image"), mmap_mode="r" if mmap else None)

    def label(self, mmap: bool = True) -> np.ndarray:
        return np.load(self.path("label"), mmap_mode="r" if mmap else None)

    def foreground(self) -> np.ndarray:
        return np.load(self.path("foreground"))

    def is_current(self, case: Case) -> bool:
        """Complete, and made from the case's sources as they are now."""
        try:
            return self.properties()["sources"] == source_stamps(case)
        except (OSError, ValueError, KeyError):
            return False

    def write(self, sources: list[dict[str, Any]], image: np.ndarray, label: np.ndarray,
              properties: dict[str, Any]) -> None:
        """The arrays, then the properties naming `sources` (their stamps from before they were read)."""
        for kind, array in (("image", image), ("label", label), ("foreground", sample_foreground(label, self.name))):
            with atomic_path(self.path(kind)) as temporary:
                np.save(temporary, array)
        write_json(self.properties_path, {**properties, "name": self.name, "sources": sources})
