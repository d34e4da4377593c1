"""Label maps hold only the classes dataset.json names, checked before training starts.

A stray value (a 9 in a 3-class dataset, a 0.5 from interpolation) would otherwise train
silently, or fail far from its cause in the loss's one-hot (a device-side assert on a GPU).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from monai.transforms import LoadImage

from ..errors import DatasetError
from .dataset_json import Case


def _values(array: np.ndarray, limit: int = 8) -> str:
    shown = ", ".join(f"{v:g}" for v in array[:limit])
    return shown + (f" and {len(array) - limit} more" if len(array) > limit else "")


def check_label_values(cases: Sequence[Case], class_names: Sequence[str]) -> None:
    """Raises a DatasetError naming every case whose label map has a value that is not a class
    index of dataset.json (0 .. len(class_names) - 1), and the offending values."""
    load = LoadImage(image_only=True)  # the reader the training transforms use, for every format
    classes = len(class_names)
    problems = []
    for case in cases:
        if case.label is None:
            continue
        values = np.unique(np.asarray(load(case.label)))
        bad = values[(values != np.round(values)) | (values < 0) | (values >= classes)]
        if bad.size:
            problems.append(f"{case.label} (case {case.name}): {_values(bad)}")
    if problems:
        legend = ", ".join(f"{i} {name}" for i, name in enumerate(class_names))
        raise DatasetError(
            f"{len(problems)} label map(s) hold values that are not classes of dataset.json ({legend}): "
            + "; ".join(problems)
            + ". Fix those label maps, or add the classes to dataset.json's \"labels\"."
        )
