"""The folds= setting of segnet-train (folds to train one after another) and segnet-predict (an
nnU-Net model folder's folds to ensemble): a list of fold numbers, or nnU-Net's fold "all"."""

from __future__ import annotations

from collections.abc import Sequence

from segnet.errors import ConfigError


def fold_numbers(value) -> list[int | str] | None:
    """`value` as a list of folds (None stays None); anything else a ConfigError saying how to write it."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ConfigError(f"folds={value}: give a list, e.g. folds=[{value}] for that fold alone or folds=[0,1,2]")
    folds = list(value)
    wrong = [fold for fold in folds if fold != "all" and (isinstance(fold, bool) or not isinstance(fold, int))]
    if not folds or wrong:
        raise ConfigError(f"folds={folds}: each fold is a number (or nnU-Net's all), e.g. folds=[0,1,2]")
    return folds
