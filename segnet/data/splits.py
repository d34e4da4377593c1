"""Training/validation splits the way nnU-Net makes them.

In order of precedence:
- `splits_final.json` in the dataset folder (nnU-Net's file: a list of {"train": [...], "val":
  [...]} by case name), fold `data.fold`;
- the dataset.json's own "validation" list, as the one fold 0;
- otherwise k-fold cross-validation over the sorted case names, shuffled with `data.split_seed`
  (nnU-Net's default 12345) exactly as scikit-learn's KFold(shuffle=True) does, which is what
  nnU-Net's generate_crossval_split calls: the same folds as nnU-Net for the same cases.
`data.fold=all` trains on every case and validates on them too, as nnU-Net's fold "all" does.
The split is seeded apart from the training seed, so runs with other seeds share their folds;
the run folder keeps it in splits.json, and evaluation of a checkpoint reads it from there.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from segnet.data.dataset_json import Case, DatasetDescription
from segnet.errors import ConfigError, DatasetError


@dataclass(frozen=True)
class Split:
    fold: int | str
    source: str
    train: tuple[Case, ...]
    val: tuple[Case, ...]

    def to_json(self) -> dict:
        return {"fold": self.fold, "source": self.source, "train": [c.name for c in self.train],
                "val": [c.name for c in self.val]}


def kfold(names: Sequence[str], folds: int, seed: int) -> list[dict[str, list[str]]]:
    """KFold(n_splits=folds, shuffle=True, random_state=seed) over sorted names, as nnU-Net's
    splits_final.json lists it."""
    ordered = sorted(names)
    if folds < 2 or folds > len(ordered):
        raise ConfigError(
            f"{len(ordered)} training case(s) cannot make data.num_folds={folds} folds; use 2 to {len(ordered)} "
            "folds, or data.fold=all"
        )
    indices = np.arange(len(ordered))
    np.random.RandomState(seed).shuffle(indices)
    sizes = np.full(folds, len(ordered) // folds)
    sizes[: len(ordered) % folds] += 1
    splits, start = [], 0
    for size in sizes:
        held_out = np.zeros(len(ordered), bool)
        held_out[indices[start : start + size]] = True
        splits.append({"train": [n for n, h in zip(ordered, held_out, strict=True) if not h],
                       "val": [n for n, h in zip(ordered, held_out, strict=True) if h]})
        start += size
    return splits


def _cases(names: Sequence[str], by_name: dict[str, Case], source: Path | str) -> tuple[Case, ...]:
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise DatasetError(f"{source} names case(s) the dataset does not have: {', '.join(unknown[:5])}")
    return tuple(by_name[n] for n in names)


def dataset_splits(description: DatasetDescription, num_folds: int, split_seed: int) -> tuple[list[dict], str]:
    """Every fold's {"train": names, "val": names}, and where they come from: the dataset's own
    splits_final.json, else its dataset.json's validation list (one fold), else a k-fold split."""
    final = description.root / "splits_final.json"
    if final.is_file():
        return json.loads(final.read_text()), str(final)
    if description.validation:
        return ([{"train": [c.name for c in description.training], "val": [c.name for c in description.validation]}],
                f"{description.root / 'dataset.json'} (its validation list)")
    folds = kfold([c.name for c in description.labelled], num_folds, split_seed)
    return folds, f"{num_folds}-fold, split seed {split_seed}"


def choose_split(description: DatasetDescription, fold: int | str, num_folds: int, split_seed: int) -> Split:
    training = list(description.labelled)
    by_name = {c.name: c for c in training}
    if str(fold) == "all":
        return Split("all", "every case trains and validates", tuple(training), tuple(training))
    if not isinstance(fold, int) or fold < 0:
        raise ConfigError(f"data.fold={fold}; use a fold number from 0, or all")
    splits, source = dataset_splits(description, num_folds, split_seed)
    if fold >= len(splits):
        raise ConfigError(
            f"data.fold={fold}, but {source} has {len(splits)} fold(s): use 0 to {len(splits) - 1}, or all"
        )
    return Split(fold, source, _cases(splits[fold]["train"], by_name, source),
                 _cases(splits[fold]["val"], by_name, source))


def read_split(path: Path, description: DatasetDescription) -> Split:
    """The split a run recorded in its splits.json."""
    recorded = json.loads(path.read_text())
    by_name = {c.name: c for c in description.labelled}
    return Split(recorded["fold"], str(path), _cases(recorded["train"], by_name, path),
                 _cases(recorded["val"], by_name, path))
