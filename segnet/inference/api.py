"""From a prediction config to label maps on disk: what segnet-predict runs."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from segnet.data.dataset_json import Case
from segnet.data.headers import header_problem
from segnet.errors import ConfigError, DatasetError
from segnet.files import remove_temporaries
from segnet.inference.exported import load_exported
from segnet.inference.loading import checkpoint_paths, inference_device, load_for_inference, run_folder
from segnet.inference.model import TrainedModel
from segnet.inference.postprocessing import rules_for
from segnet.inference.predictor import Prediction, PredictionWriter, Predictor, find_cases

log = logging.getLogger(__name__)
USAGE = "segnet-predict ckpt_path=CKPT input=IMAGES output=FOLDER"


def load_models(cfg: DictConfig) -> list[TrainedModel]:
    """The checkpoints (ckpt_path=) or exported packages (model=) to predict with: one, or several
    for an ensemble."""
    given = [key for key in ("ckpt_path", "exported") if cfg.get(key) is not None]
    if len(given) != 1:
        raise ConfigError("give ckpt_path=CKPT (a training checkpoint) or model=PATH.pt2 (an exported package), "
                          f"one of them: {USAGE}")
    if given == ["exported"]:
        device = inference_device(cfg.device)
        paths = checkpoint_paths(cfg, "exported", "model", "segnet-export's model.pt2")
        return [load_exported(path, device) for path in paths]
    return [load_for_inference(p, cfg.device, cfg.op.backend) for p in checkpoint_paths(cfg)]


def model_folders(cfg: DictConfig) -> list[Path]:
    """Where each model's postprocessing.json would be: a checkpoint's run folder, an export's own."""
    if cfg.get("exported") is not None:
        return [p.resolve().parent for p in checkpoint_paths(cfg, "exported", "model", "segnet-export's model.pt2")]
    return [run_folder(p) for p in checkpoint_paths(cfg)]


def check_headers(cases: list[Case], max_voxels: int, channels: int, task: str = "predicted") -> None:
    """Every input scan's (and label's) header, before anything is read or written: one line per
    bad file."""
    problems = [problem for case in cases for path in case.files
                if (problem := header_problem(path, max_voxels, channels if case.images == (path,) else None))]
    if problems:
        raise DatasetError(f"{len(problems)} input scan(s) cannot be {task}, nothing was written:\n"
                           + "\n".join(problems))


def predict(cfg: DictConfig) -> list[Prediction]:
    for key in ("input", "output"):
        if OmegaConf.is_missing(cfg, key):
            raise ConfigError(f"{key} is required: {USAGE}")
    models = load_models(cfg)
    predictor = Predictor(models, tta=bool(cfg.tta))
    cases = find_cases(Path(cfg.input), predictor.in_channels)
    check_headers(cases, int(cfg.max_voxels), predictor.in_channels)
    rules = rules_for(cfg.postprocessing, model_folders(cfg))
    writer = PredictionWriter(predictor, Path(cfg.output), save_probabilities=bool(cfg.save_probabilities),
                              rules=rules)
    if cfg.get("continue"):  # nnU-Net's --continue_prediction: after a killed run, only what is missing
        done = [case for case in cases if writer.is_done(case)]
        cases = [case for case in cases if not writer.is_done(case)]
        left = remove_temporaries(cfg.output) if Path(cfg.output).is_dir() else []
        log.info("continuing: %d case(s) already in %s (%d half-written file(s) removed)", len(done), cfg.output,
                 len(left))
    log.info("predicting %d case(s) from %s with %d model(s), tta %s, postprocessing %s", len(cases), cfg.input,
             len(models), cfg.tta, rules.to_json())
    predictions = [writer.run_case(case) for case in tqdm(cases, desc="predicting", unit="case")]
    log.info("label maps in %s", cfg.output)
    return predictions
