"""segnet-train's work: one run, or, with `folds=[...]`, one run per fold inside the run folder
(<run>/fold_<k>, one after another) whose objectives are averaged: what one trial of a search
returns when it is to be scored across folds (experiment=search_loss folds=[0,1,2])."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from segnet.errors import ConfigError
from segnet.files import write_json
from segnet.fold_numbers import fold_numbers

FOLDS_FILE = "folds.json"


def objective_of(metrics: dict[str, Any], name: str) -> float:
    if name not in metrics or not isinstance(metrics[name], (int, float)):
        numbers = sorted(key for key, value in metrics.items() if isinstance(value, (int, float)))
        raise ConfigError(f"objective={name} is not a number of metrics.json; use one of {', '.join(numbers)}")
    return float(metrics[name])


def train_command(cfg: DictConfig) -> dict[str, Any]:
    """The run's metrics; with `folds`, each fold's objective and their mean (under the objective's name)."""
    from segnet.training.train import train

    folds = fold_numbers(cfg.get("folds"))
    if not folds:
        metrics = train(cfg)
        objective_of(metrics, cfg.objective)
        return metrics
    if "fold" not in cfg.data:
        raise ConfigError(f"folds={folds} trains folds of a dataset folder: add data=folder data.root=DIR")
    if cfg.get("ckpt_path") not in (None, "auto"):
        raise ConfigError(f"folds={folds} trains each fold in its own folder, resuming its own last.ckpt; "
                          f"ckpt_path={cfg.ckpt_path} would resume one checkpoint in every fold: leave it out")
    output = Path(cfg.paths.output_dir)
    scores = {}
    for fold in folds:
        one = copy.deepcopy(cfg)
        one.folds, one.data.fold, one.paths.output_dir = None, fold, str(output / f"fold_{fold}")
        scores[str(fold)] = objective_of(train(one), cfg.objective)
    mean = math.fsum(scores.values()) / len(scores)
    summary = {cfg.objective: mean, "folds": scores}
    write_json(output / FOLDS_FILE, summary)
    return summary
