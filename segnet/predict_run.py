"""From a prediction config to label maps on disk: what scripts/predict.py calls."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from .errors import ConfigError
from .evaluate_run import load_for_inference
from .prediction import Prediction, PredictionWriter, Predictor, find_cases

log = logging.getLogger(__name__)


def predict(cfg: DictConfig) -> list[Prediction]:
    for key in ("ckpt_path", "input", "output"):
        if OmegaConf.is_missing(cfg, key):
            raise ConfigError(f"{key} is required: python scripts/predict.py ckpt_path=CKPT input=IMAGES output=FOLDER")
    paths = [Path(p) for p in (cfg.ckpt_path if OmegaConf.is_list(cfg.ckpt_path) else [cfg.ckpt_path])]
    for path in paths:
        if not path.is_file():
            raise ConfigError(f"ckpt_path={path} is not a file; point it at a training run's checkpoints/best.ckpt")
    predictor = Predictor([load_for_inference(p, cfg.device, cfg.op.backend) for p in paths], tta=bool(cfg.tta))
    cases = find_cases(Path(cfg.input), predictor.in_channels)
    writer = PredictionWriter(predictor, Path(cfg.output), save_probabilities=bool(cfg.save_probabilities))
    log.info("predicting %d case(s) from %s with %d model(s), tta %s", len(cases), cfg.input, len(paths), cfg.tta)
    predictions = [writer.run_case(case) for case in tqdm(cases, desc="predicting", unit="case")]
    log.info("label maps in %s", cfg.output)
    return predictions
