"""The cascade's previous-stage label maps on the plan's grid, in the preprocessed cache beside
each case, so that training crops them by memory map with the image and the label.

The source of each case is a label map on its image's own grid (the low-resolution stage's
out-of-fold prediction, segnet.inference.previous_stage). It is loaded as the case's label is,
with the case's image (orientation, the crop the image's box gives, then the plan's spacing by
nearest neighbour), onto the grid of the cached image.
The maps of one set of sources lie in a folder named after where those sources are, and each map
records its source's stamp (segnet.data.derived): a source predicted again (its first stage
retrained) is loaded again, never read stale.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from segnet.data.derived import digest, is_unchanged, source_stamp
from segnet.data.transforms import eval_transforms, load_case
from segnet.errors import DatasetError
from segnet.files import atomic_path, exclusive, write_json
from segnet.preprocessing.cache import PreprocessedCase, label_dtype


@dataclass(frozen=True)
class PreviousMaps:
    """`sources` {case name: its previous-stage label map file}, loaded with `images` {case name:
    its image, as segnet.data.transforms.case_dicts gives it} by the plan's `geometry`."""
    sources: Mapping[str, Path]
    images: Mapping[str, str | list[str]]
    geometry: Mapping[str, Any] = field(default_factory=dict)

    @functools.cached_property
    def key(self) -> str:
        """Where the sources lie, which names the folder of their maps."""
        return digest(sorted({str(Path(p).parent) for p in self.sources.values()}))

    def folder(self, entry: PreprocessedCase) -> Path:
        return entry.folder / f"previous-{self.key}"

    def path(self, entry: PreprocessedCase) -> Path:
        return self.folder(entry) / f"{entry.name}.previous.npy"

    def stamp_path(self, entry: PreprocessedCase) -> Path:
        return self.folder(entry) / f"{entry.name}.previous.json"

    def read(self, entry: PreprocessedCase, mmap: bool = True) -> np.ndarray:
        """(1, *spatial) label map of the entry on its grid."""
        return np.load(self.path(entry), mmap_mode="r" if mmap else None)

    def is_current(self, entry: PreprocessedCase) -> bool:
        try:
            stamp = json.loads(self.stamp_path(entry).read_text())
        except (OSError, ValueError):
            return False
        return stamp["path"] == str(self.sources[entry.name]) and is_unchanged(stamp) and self.path(entry).is_file()

    def ensure(self, entries: Sequence[PreprocessedCase]) -> None:
        """Load the map of each entry that lacks a current one, under its case's lock."""
        for entry in entries:
            if self.is_current(entry):
                continue
            self.folder(entry).mkdir(parents=True, exist_ok=True)
            with exclusive(entry.folder / f".{entry.name}.lock"):
                if self.is_current(entry):
                    continue
                source = self.sources[entry.name]
                stamp = source_stamp(source)
                loaded = load_case(eval_transforms(True, **self.geometry),
                                   {"image": self.images[entry.name], "label": str(source)})["label"].numpy()
                shape = entry.properties()["shape"]
                if list(loaded.shape[1:]) != list(shape):
                    raise DatasetError(f"{source}: the previous stage's label map of {entry.name} lands on a grid of "
                                       f"{list(loaded.shape[1:])} voxels, the case's image on {shape}: it was not "
                                       "written on this image's grid; predict it again")
                with atomic_path(self.path(entry)) as temporary:
                    np.save(temporary, loaded.astype(label_dtype(int(loaded.max(initial=0)))))
                write_json(self.stamp_path(entry), stamp)
