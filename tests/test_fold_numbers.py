"""folds= (segnet-train's folds one after another, segnet-predict's nnU-Net folds): a list, and a
one-line error naming how to write it instead of a TypeError deep inside."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from segnet.errors import ConfigError
from segnet.fold_numbers import fold_numbers
from segnet.training.train_command import train_command


def test_a_list_of_folds_passes_and_none_stays_none():
    assert fold_numbers(None) is None
    assert fold_numbers(OmegaConf.create({"folds": [0, 2, "all"]}).folds) == [0, 2, "all"]


@pytest.mark.parametrize("value", [3, "3", [], [0, 1.5], [True], ["two"]])
def test_anything_else_is_refused_saying_how_to_write_it(value):
    with pytest.raises(ConfigError, match=r"folds=.*e\.g\. folds=\[") as error:
        fold_numbers(value)
    if value == 3:
        assert "folds=[3] for that fold alone" in str(error.value)


def test_training_refuses_a_number_of_folds_before_it_trains():
    cfg = OmegaConf.create({"folds": 3, "data": {"fold": 0}, "objective": "val_dice_mean"})
    with pytest.raises(ConfigError, match=r"folds=3: give a list"):
        train_command(cfg)
