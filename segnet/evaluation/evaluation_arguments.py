"""What segnet-evaluate is given, checked before the evaluation code is imported (this module
imports neither torch nor MONAI): one checkpoint file and a dataset folder."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from segnet.checkpoints.paths import one_checkpoint
from segnet.data.dataset_json import DatasetDescription, describe_dataset
from segnet.errors import ConfigError


def evaluation_inputs(cfg: DictConfig) -> tuple[Path, DatasetDescription]:
    """The checkpoint to evaluate and the dataset to evaluate it on."""
    checkpoint = one_checkpoint(cfg, "evaluation")
    if OmegaConf.is_missing(cfg.data, "root"):
        raise ConfigError("data.root is required: point it at the dataset folder (dataset.json, imagesTr, labelsTr)")
    return checkpoint, describe_dataset(str(cfg.data.root))
