"""A dataset's integrity, checked before training starts (as nnU-Net's verify_dataset_integrity).

Every case is read as training will read it (MONAI's loader, so any format the training reads),
and every problem is collected before stopping: a file that cannot be read, channels or label of
one case on different grids (shape, or affine beyond `AFFINE_TOLERANCE`), NaN or infinite
intensities, label values that are not classes of dataset.json nor its ignore label (a stray 9,
a 0.5 from interpolation would otherwise train silently, or fail far from their cause in the
loss's one-hot), and case names listed twice. The DatasetError names every offending case and what
is wrong with it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from segnet.data.dataset_json import Case, DatasetDescription
from segnet.data.formats import is_natural
from segnet.data.headers import MAX_VOXELS, header_problem, read_problem
from segnet.errors import DatasetError

AFFINE_TOLERANCE = 1e-3  # mm (origin) and mm per voxel (direction x spacing), as nnU-Net allows


def _values(array: np.ndarray, limit: int = 8) -> str:
    shown = ", ".join(f"{v:g}" for v in array[:limit])
    return shown + (f" and {len(array) - limit} more" if len(array) > limit else "")


def read_case(case: Case, load: Callable, max_voxels: int = MAX_VOXELS, channels: int = 1) -> dict[str, Any] | str:
    """Every file of a case as the loader reads it, by path, or why one cannot be read (its header
    checked first: nothing is allocated from a header that lies)."""
    loaded = {}
    for path in case.files:
        problem = header_problem(path, max_voxels, channels if case.images == (path,) else None,
                                 label=path == case.label)
        if problem:
            return problem
        try:
            loaded[path] = load(path)
        except Exception as error:  # any reader's failure: report it with the others
            return read_problem(path, error)
    return loaded


def spatial_shape(image: Any) -> tuple[int, ...]:
    """The grid of a loaded file, without the channels a multi-channel file holds."""
    return tuple(int(n) for n in image.meta["spatial_shape"])


def case_problems(case: Case, loaded: dict[str, Any], description: DatasetDescription) -> list[str]:
    """What is wrong with one case's files (as read_case returned them)."""
    problems = []
    files = list(loaded)
    first = case.images[0]
    reference_shape = spatial_shape(loaded[first])
    reference_affine = np.asarray(loaded[first].affine)
    for path in files[1:]:
        shape, affine = spatial_shape(loaded[path]), np.asarray(loaded[path].affine)
        if shape != reference_shape and is_natural(path):
            problems.append(f"{path}: {shape[0]} x {shape[1]} pixels (rows x columns) but {first} has "
                            f"{reference_shape[0]} x {reference_shape[1]}: a case's files must have one size")
        elif shape != reference_shape:
            problems.append(f"{path}: shape {shape} differs from {first}'s {reference_shape}")
        elif np.abs(affine - reference_affine).max() > AFFINE_TOLERANCE:
            problems.append(f"{path}: its affine differs from {first}'s (a different grid or orientation)")
    for path in case.images:
        if not np.isfinite(np.asarray(loaded[path])).all():
            problems.append(f"{path}: NaN or infinite intensities")
    if case.label:
        values = np.unique(np.asarray(loaded[case.label]))
        allowed = np.isin(values, description.label_values) | (values == description.ignore_label)
        bad = values[~allowed]  # a fractional value (an interpolated label) is no class's value either
        if bad.size:
            problems.append(f"{case.label}: label values {_values(bad)} are not classes of dataset.json "
                            f"({label_legend(description)})")
    return problems


def label_legend(description: DatasetDescription) -> str:
    """What a label file may hold, for messages: each class's value and name, or the regions' values."""
    if description.regions is None:
        legend = ", ".join(f"{i} {name}" for i, name in enumerate(description.class_names))
    else:
        legend = "values " + ", ".join(map(str, description.label_values)) + " of the regions " + ", ".join(
            f"{name} {list(values)}" for name, values in zip(description.class_names[1:], description.regions.values,
                                                             strict=True))
    return legend + (f", {description.ignore_label} ignore" if description.ignore_label is not None else "")


def check_case(case: Case, load: Callable, description: DatasetDescription,
               max_voxels: int = MAX_VOXELS) -> tuple[dict[str, Any] | None, list[str]]:
    """One case read and checked: its files as the loader reads them (None if it is broken),
    and what is wrong with it."""
    loaded = read_case(case, load, max_voxels, description.in_channels)
    if isinstance(loaded, str):
        return None, [loaded]
    problems = case_problems(case, loaded, description)
    return (None if problems else loaded), problems


def duplicates(cases: Sequence[Case]) -> list[str]:
    return [f"case {name} is listed {count} times" for name, count in Counter(c.name for c in cases).items()
            if count > 1]


def raise_problems(description: DatasetDescription, problems: list[str]) -> None:
    if problems:
        raise DatasetError(
            f"{description.root} has {len(problems)} problem(s); training does not start on a broken dataset:\n  - "
            + "\n  - ".join(problems)
        )
