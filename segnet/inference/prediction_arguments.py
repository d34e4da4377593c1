"""What segnet-predict is given, checked before the prediction code is imported (this module
imports neither torch nor MONAI): the input and output folders, and one kind of model, each of
its files there."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from segnet.checkpoints.paths import checkpoint_paths
from segnet.errors import ConfigError

USAGE = "segnet-predict ckpt_path=CKPT input=IMAGES output=FOLDER"


def exported_paths(cfg: DictConfig) -> list[Path]:
    return checkpoint_paths(cfg, "exported", "model", "segnet-export's model.pt2")


def model_paths(cfg: DictConfig) -> list[Path]:
    """The checkpoints (ckpt_path=) or exported packages (model=) to predict with: one, or several
    for an ensemble."""
    given = [key for key in ("ckpt_path", "exported") if cfg.get(key) is not None]
    if len(given) != 1:
        raise ConfigError("give ckpt_path=CKPT (a training checkpoint) or model=PATH.pt2 (an exported package), "
                          f"one of them: {USAGE}")
    return exported_paths(cfg) if given == ["exported"] else checkpoint_paths(cfg)


def check_prediction_arguments(cfg: DictConfig) -> None:
    for key in ("input", "output"):
        if OmegaConf.is_missing(cfg, key):
            raise ConfigError(f"{key} is required: {USAGE}")
    model_paths(cfg)
