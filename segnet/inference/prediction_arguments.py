"""What segnet-predict is given, checked before the prediction code is imported (this module
imports neither torch nor MONAI): the input and output folders, and one kind of model, each of
its files there: training checkpoints (ckpt_path=), segnet-export's programs (model=PATH.pt2) or
model packages (model=MODEL.zip, segnet-export-model's: their checkpoints, unpacked)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from segnet.checkpoints.paths import checkpoint_paths
from segnet.errors import ConfigError
from segnet.inference.package import package_checkpoints, package_tta

USAGE = "segnet-predict ckpt_path=CKPT input=IMAGES output=FOLDER"


def exported_paths(cfg: DictConfig) -> list[Path]:
    return checkpoint_paths(cfg, "exported", "model", "segnet-export's model.pt2")


def packages(cfg: DictConfig) -> list[Path]:
    """The model packages model= names (none where it names exported programs, or is not given)."""
    if cfg.get("exported") is None:
        return []
    paths = exported_paths(cfg)
    zipped = [path for path in paths if path.suffix == ".zip"]
    if zipped and len(zipped) != len(paths):
        raise ConfigError("model= mixes model packages (.zip) and exported programs (.pt2): give one kind")
    return zipped


def is_exported(cfg: DictConfig) -> bool:
    """Whether the models are segnet-export's programs (not checkpoints, nor packages of them)."""
    return cfg.get("exported") is not None and not packages(cfg)


def model_paths(cfg: DictConfig) -> list[Path]:
    """The checkpoints (ckpt_path=, or a package's), or exported programs (model=) to predict with:
    one, or several for an ensemble."""
    given = [key for key in ("ckpt_path", "exported") if cfg.get(key) is not None]
    if len(given) != 1:
        raise ConfigError("give ckpt_path=CKPT (a training checkpoint) or model=PATH.pt2 or MODEL.zip (an exported "
                          f"program or a model package), one of them: {USAGE}")
    if given == ["ckpt_path"]:
        return checkpoint_paths(cfg)
    zipped = packages(cfg)
    return [checkpoint for package in zipped for checkpoint in package_checkpoints(package)] if zipped else \
        exported_paths(cfg)


def prediction_tta(cfg: DictConfig) -> bool:
    """Whether to mirror: tta=true or false as given, else (tta not given) as the packages model=
    names were scored, else mirrored, as nnU-Net predicts."""
    if cfg.tta is not None:
        if not isinstance(cfg.tta, bool):
            raise ConfigError(f"tta={cfg.tta}: give tta=true or tta=false, or leave it out (a model package's own, "
                              "else true)")
        return cfg.tta
    recorded = {package_tta(package) for package in packages(cfg)}
    if len(recorded) > 1:
        raise ConfigError("model= names packages of which some predict mirrored and some not (their choices' tta): "
                          "give tta=true or tta=false")
    return recorded.pop() if recorded else True


def part_of(cases: list, num_parts: int, part_id: int) -> list:
    """The cases of part `part_id` of `num_parts` (nnU-Net's split: every num_parts-th case from
    part_id), so that processes given each part predict every case exactly once."""
    if not (isinstance(num_parts, int) and isinstance(part_id, int) and 0 <= part_id < num_parts):
        raise ConfigError(f"num_parts={num_parts} part_id={part_id}: give num_parts >= 1 and part_id from 0 to "
                          "num_parts - 1, one process per part")
    return cases[part_id::num_parts]


def check_prediction_arguments(cfg: DictConfig) -> None:
    for key in ("input", "output"):
        if OmegaConf.is_missing(cfg, key):
            raise ConfigError(f"{key} is required: {USAGE}")
    part_of([], cfg.num_parts, cfg.part_id)
    model_paths(cfg)
    prediction_tta(cfg)
