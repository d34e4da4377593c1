"""From a prediction config to label maps on disk: what scripts/predict.py runs, and what
`python -m segnet.predict_run` runs where segnet is installed from a wheel (no scripts/)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from .config import CONF, register_resolvers
from .errors import ConfigError, user_errors_as_one_line
from .evaluate_run import evaluation_device, load_for_inference
from .exported_model import ExportedModel
from .prediction import Prediction, PredictionWriter, Predictor, find_cases

log = logging.getLogger(__name__)


def load_models(cfg: DictConfig) -> list:
    """The checkpoints (ckpt_path=) or exported packages (model=) to predict with: one, or several
    for an ensemble."""
    given = [key for key in ("ckpt_path", "exported") if cfg.get(key) is not None]
    if len(given) != 1:
        raise ConfigError("give ckpt_path=CKPT (a training checkpoint) or model=PATH.pt2 (an exported package), "
                          "one of them: python scripts/predict.py ckpt_path=CKPT input=IMAGES output=FOLDER")
    key = given[0]
    paths = [Path(p) for p in (cfg[key] if OmegaConf.is_list(cfg[key]) else [cfg[key]])]
    for path in paths:
        if not path.is_file():
            raise ConfigError(f"{'model' if key == 'exported' else key}={path} is not a file; point it at a training "
                              "run's checkpoints/best.ckpt or at scripts/export.py's model.pt2")
    if key == "exported":
        device = evaluation_device(cfg.device)
        return [ExportedModel(path, device) for path in paths]
    return [load_for_inference(p, cfg.device, cfg.op.backend) for p in paths]


def predict(cfg: DictConfig) -> list[Prediction]:
    for key in ("input", "output"):
        if OmegaConf.is_missing(cfg, key):
            raise ConfigError(f"{key} is required: python scripts/predict.py ckpt_path=CKPT input=IMAGES output=FOLDER")
    models = load_models(cfg)
    predictor = Predictor(models, tta=bool(cfg.tta))
    cases = find_cases(Path(cfg.input), predictor.in_channels)
    writer = PredictionWriter(predictor, Path(cfg.output), save_probabilities=bool(cfg.save_probabilities))
    log.info("predicting %d case(s) from %s with %d model(s), tta %s", len(cases), cfg.input, len(models), cfg.tta)
    predictions = [writer.run_case(case) for case in tqdm(cases, desc="predicting", unit="case")]
    log.info("label maps in %s", cfg.output)
    return predictions


@hydra.main(version_base="1.3", config_path=str(CONF), config_name="predict")
def _hydra_main(cfg: DictConfig) -> None:
    with user_errors_as_one_line():
        predict(cfg)


def main() -> None:
    """python scripts/predict.py ARGS, or python -m segnet.predict_run ARGS."""
    register_resolvers()
    # model=PATH.pt2 names an exported package; Hydra would take `model` for the config group
    # conf/model/, so it reaches the configuration as `exported`.
    sys.argv = ["exported=" + a.removeprefix("model=") if a.startswith("model=") else a for a in sys.argv]
    _hydra_main()


if __name__ == "__main__":
    main()
