"""An nnU-Net v2 trained model folder (nnUNetTrainer__nnUNetPlans__<configuration>: dataset.json,
plans.json, fold_<N>/checkpoint_final.pth), recognized and its checkpoints listed without torch:
segnet-predict checks what it is given before the prediction code is imported."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from segnet.errors import ConfigError

FINAL = "checkpoint_final.pth"  # nnU-Net's final weights, what its predictor reads by default
CHECKPOINT_ENDING = ".pth"
FOLD = re.compile(r"^fold_(\d+|all)$")
FILES = ("dataset.json", "plans.json")


def is_model_folder(path: Path) -> bool:
    """Whether `path` is an nnU-Net trained model folder (its plans.json and dataset.json)."""
    return path.is_dir() and all((path / name).is_file() for name in FILES)


def is_model_checkpoint(path: Path) -> bool:
    """Whether `path` is a checkpoint in a fold of an nnU-Net trained model folder."""
    return path.suffix == CHECKPOINT_ENDING and bool(FOLD.match(path.parent.name)) and is_model_folder(
        path.parent.parent)


def fold_checkpoint(entry: Path) -> Path | None:
    """The checkpoint a fold of an nnU-Net trained model stands for where `entry` names one: a
    checkpoint in the fold itself, or the fold's folder (its checkpoint_final.pth, its final
    weights as a segnet run's final.ckpt); None for anything else."""
    if is_model_checkpoint(entry):
        return entry
    return entry / FINAL if FOLD.match(entry.name) and is_model_folder(entry.parent) else None


def run_checkpoint(run: Path, checkpoint_name: str) -> Path:
    """The checkpoint a run predicts with: a segnet run folder's checkpoints/<checkpoint_name>, an
    nnU-Net fold's checkpoint_final.pth (or the checkpoint in a fold given itself)."""
    return fold_checkpoint(run) or run / "checkpoints" / checkpoint_name


def fold_checkpoints(folder: Path, folds: list | None = None, shown_as: str = "model") -> list[Path]:
    """The checkpoint_final.pth of each fold of `folder` that `folds` names (None: every fold that
    has one, as nnU-Net's predictor finds them); a ConfigError naming what is missing."""
    present = sorted((p for p in folder.glob(f"fold_*/{FINAL}") if FOLD.match(p.parent.name)),
                     key=lambda p: p.parent.name)
    if folds is None:
        if not present:
            raise ConfigError(f"{shown_as}={folder} has no fold_<N>/{FINAL}: train a fold to its end with nnU-Net, or "
                              "name a checkpoint (e.g. fold_0/checkpoint_best.pth)")
        return present
    paths = [folder / f"fold_{fold}" / FINAL for fold in folds]
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        raise ConfigError(f"folds={list(folds)}: {', '.join(missing)} missing; {folder} has "
                          f"{', '.join(p.parent.name for p in present) or 'no finished fold'}")
    return paths


def folder_of(checkpoint: Path) -> Path:
    """The trained model folder a fold's checkpoint lies in."""
    return checkpoint.resolve().parent.parent


def fold_of(checkpoint: Path) -> int | str:
    fold = FOLD.match(checkpoint.resolve().parent.name)[1]
    return fold if fold == "all" else int(fold)


def configuration_of(folder: Path) -> str:
    """The configuration a trained model folder trained: its name's last part, as nnU-Net names it
    (<trainer>__<plans>__<configuration>)."""
    parts = folder.resolve().name.split("__")
    if len(parts) != 3:
        raise ConfigError(f"{folder} is not named as nnU-Net names a trained model folder "
                          "(<trainer>__<plans>__<configuration>): its configuration is read from the name")
    return parts[2]


@dataclass(frozen=True)
class ModelFolder:
    """What a trained model folder says: the plans, the dataset.json and the configuration."""

    path: Path
    plans: dict[str, Any]
    dataset: dict[str, Any]
    configuration: str

    @classmethod
    def read(cls, path: Path) -> ModelFolder:
        files = {}
        for name in FILES:
            try:
                files[name] = json.loads((path / name).read_text())
            except (OSError, json.JSONDecodeError) as error:
                raise ConfigError(f"{path / name} is not readable JSON ({error}); copy the model folder "
                                  "again") from None
        configuration = configuration_of(path)
        if configuration not in files["plans.json"].get("configurations", {}):
            raise ConfigError(f"{path}'s name says configuration {configuration}, which {path / 'plans.json'} does "
                              "not plan")
        return cls(path, files["plans.json"], files["dataset.json"], configuration)
