"""What segnet-predict is given, checked before the prediction code is imported (this module
imports neither torch nor MONAI): the input and output folders, and one kind of model, each of
its files there: training checkpoints (ckpt_path=), segnet-export's programs (model=PATH.pt2 or PATH.onnx),
model packages (model=MODEL.zip, segnet-export-model's: their checkpoints, unpacked) or nnU-Net v2
trained model folders (model=DIR: the checkpoint_final.pth of its folds, or of folds=[...]; or
model=DIR/fold_N/checkpoint_best.pth, segnet.nnunet)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from segnet.checkpoints.paths import checkpoint_paths, run_folder
from segnet.errors import ConfigError
from segnet.fold_numbers import fold_numbers
from segnet.inference.export_files import metadata_path
from segnet.inference.package import package_checkpoints, package_tta
from segnet.nnunet.folder import FILES, fold_checkpoints, folder_of, is_model_checkpoint, is_model_folder

USAGE = "segnet-predict ckpt_path=CKPT input=IMAGES output=FOLDER"


CHECKPOINTS, EXPORTED, PACKAGES, NNUNET = "checkpoints", "exported", "packages", "nnunet"


@dataclass(frozen=True)
class PredictionInputs:
    """The models segnet-predict predicts with, worked out once from its config."""

    kind: str  # CHECKPOINTS (ckpt_path=), EXPORTED (model=PATH.pt2), PACKAGES (model=MODEL.zip) or NNUNET (model=DIR)
    models: tuple[Path, ...]  # what is loaded: checkpoints (a package's, unpacked) or exported programs
    files: tuple[Path, ...]  # what the models are read from, as the output's record hashes them
    folders: tuple[Path, ...]  # where each model's postprocessing.json would be
    tta: bool


def given_models(cfg: DictConfig) -> tuple[str, list[Path]]:
    """The kind of model the config names, and the files it names: checkpoints (ckpt_path=), or
    exported programs or model packages (model=), one file or several for an ensemble."""
    given = [key for key in ("ckpt_path", "exported") if cfg.get(key) is not None]
    if len(given) != 1:
        raise ConfigError("give ckpt_path=CKPT (a training checkpoint) or model=PATH.pt2 or MODEL.zip (an exported "
                          f"program or a model package), one of them: {USAGE}")
    if cfg.get("folds") is not None and not nnunet_given(cfg):
        raise ConfigError("folds= picks the folds of an nnU-Net model folder (model=DIR); give the checkpoints "
                          "themselves otherwise")
    if given == ["ckpt_path"]:
        return CHECKPOINTS, checkpoint_paths(cfg)
    if nnunet_given(cfg):
        return NNUNET, nnunet_checkpoints(cfg)
    paths = checkpoint_paths(cfg, "exported", "model", "segnet-export's model.pt2")
    zipped = [path for path in paths if path.suffix == ".zip"]
    if zipped and len(zipped) != len(paths):
        raise ConfigError("model= mixes model packages (.zip) and exported programs (.pt2): give one kind")
    return (PACKAGES if zipped else EXPORTED), paths


def exported_given(cfg: DictConfig) -> list[Path]:
    given = cfg.get("exported")
    return [Path(p) for p in (given if OmegaConf.is_list(given) else [given] if given is not None else [])]


def nnunet_given(cfg: DictConfig) -> bool:
    """Whether model= names nnU-Net trained model folders (or checkpoints in their folds)."""
    return any(is_model_folder(path) or is_model_checkpoint(path) for path in exported_given(cfg))


def nnunet_checkpoints(cfg: DictConfig) -> list[Path]:
    """The fold checkpoints model= names: each folder's folds (folds=[...], else every fold that
    finished), and checkpoints named themselves."""
    checkpoints = []
    for path in exported_given(cfg):
        if is_model_folder(path):
            checkpoints += fold_checkpoints(path, fold_numbers(cfg.get("folds")))
        elif is_model_checkpoint(path):
            checkpoints.append(path)
        else:
            raise ConfigError(f"model={path} is no nnU-Net trained model folder (with plans.json and dataset.json) "
                              "while others given are: an ensemble names nnU-Net models of one kind")
    return checkpoints


def models_of(kind: str, given: list[Path]) -> list[Path]:
    """The checkpoints or exported programs to load: a package's are its checkpoints, unpacked."""
    if kind == PACKAGES:
        return [checkpoint for package in given for checkpoint in package_checkpoints(package)]
    return given


def model_files(kind: str, given: list[Path]) -> list[Path]:
    """The files the models are read from: each checkpoint, each model package, or each export's
    program and its model.json."""
    if kind == EXPORTED:
        return [file for path in given for file in (path, metadata_path(path))]
    if kind == NNUNET:  # each checkpoint, then its folder's plan and labels
        return [*given, *dict.fromkeys(folder_of(path) / name for path in given for name in FILES)]
    return given


def model_folders(kind: str, models: list[Path]) -> list[Path]:
    """Where each model's postprocessing.json would be: a checkpoint's run folder (in a package,
    its model's folder), an export's own."""
    if kind == EXPORTED:
        return [path.resolve().parent for path in models]
    if kind == NNUNET:
        return [folder_of(path) for path in models]
    return [run_folder(path) for path in models]


def prediction_tta(tta: bool | None, packages: list[Path]) -> bool:
    """Whether to mirror: tta=true or false as given, else (tta not given) as the packages model=
    names were scored, else mirrored, as nnU-Net predicts."""
    if tta is not None:
        if not isinstance(tta, bool):
            raise ConfigError(f"tta={tta}: give tta=true or tta=false, or leave it out (a model package's own, "
                              "else true)")
        return tta
    recorded = {package_tta(package) for package in packages}
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


def prediction_inputs(cfg: DictConfig) -> PredictionInputs:
    """What segnet-predict is given, checked: the input and output folders, the parts, and the
    models."""
    for key in ("input", "output"):
        if OmegaConf.is_missing(cfg, key):
            raise ConfigError(f"{key} is required: {USAGE}")
    part_of([], cfg.num_parts, cfg.part_id)
    return models_named(cfg)


def models_named(cfg: DictConfig) -> PredictionInputs:
    """The models the config names (ckpt_path= or exported=, folds=, tta=), checked: what
    segnet-predict and segnet.load_model load."""
    kind, given = given_models(cfg)
    models = models_of(kind, given)
    tta = prediction_tta(cfg.tta, given if kind == PACKAGES else [])
    return PredictionInputs(kind, tuple(models), tuple(model_files(kind, given)), tuple(model_folders(kind, models)),
                            tta)
