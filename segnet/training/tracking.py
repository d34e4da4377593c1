"""Where a run is tracked besides its folder: Lightning's loggers as conf/logger/ names them, one
(logger=mlflow) or several (logger=[tensorboard,mlflow]; each option is a key of the logger
section), and what the experiment trackers get: before the fit, the run's resolved configuration
as parameters (`config.<key>`, each once: segnet.training.loggers); once the run has finished,
metrics.json, config.yaml and the run's pictures as files.

MLflow and Weights & Biases are optional (the `tracking` extra); a logger whose library is missing
stops the run before anything is built, naming what to install.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from segnet.errors import ConfigError

if TYPE_CHECKING:  # the check runs before Lightning is imported
    from lightning.pytorch.loggers import Logger

# The library each optional logger needs, by its class's name (conf/logger/ chooses segnet's
# resumable MLFlowLogger; Lightning's is there for a configuration of one's own).
NEEDS = {"ResumableMLFlowLogger": "mlflow", "MLFlowLogger": "mlflow", "ConfiguredWandbLogger": "wandb",
         "WandbLogger": "wandb"}
EXTRA = "pip install -e '.[tracking]'"
ATTEMPT_KEYS = ("ckpt_path", "resumed_from")  # what one attempt at a run resumes, which the next changes


def check_loggers(cfg: DictConfig) -> None:
    """Every chosen logger's library installed; else a ConfigError naming it and the extra."""
    for name, settings in (cfg.get("logger") or {}).items():
        library = NEEDS.get(str(settings.get("_target_", "")).rpartition(".")[2])
        if library is not None and importlib.util.find_spec(library) is None:
            raise ConfigError(f"logger={name} needs the {library} package, which is not installed: {EXTRA} "
                              f"(segnet's tracking extra), or pip install {library}")


def build_loggers(cfg: DictConfig) -> list[Logger]:
    return [instantiate(settings) for settings in (cfg.get("logger") or {}).values()]


def flattened(tree: Any, prefix: str) -> dict[str, Any]:
    """{"prefix.a.b": value} of a nested configuration."""
    if isinstance(tree, dict):
        return {key: value for name, child in tree.items()
                for key, value in flattened(child, f"{prefix}.{name}").items()}
    return {prefix: tree}


def publish_configuration(loggers: list[Logger], cfg: DictConfig) -> None:
    """The run's resolved configuration, to the trackers that keep it as parameters (a running
    run is found by them too). Less the checkpoint an attempt resumes (ckpt_path, and the
    loggers' resumed_from): the attempt's, not the run's (metrics.json's resumed_from)."""
    params = {key: value for key, value in flattened(OmegaConf.to_container(cfg, resolve=True), "config").items()
              if key.rpartition(".")[2] not in ATTEMPT_KEYS}
    for logger in loggers:
        if hasattr(logger, "log_configuration"):  # segnet.training.loggers' trackers
            logger.log_configuration(params)


def publish_run(loggers: list[Logger], output_dir: Path) -> None:
    """The finished run's files, to the trackers that keep them."""
    from lightning.pytorch.loggers import MLFlowLogger, WandbLogger

    kept = (output_dir / "metrics.json", output_dir / "config.yaml", *sorted(output_dir.glob("*.png")))
    files = [path for path in kept if path.is_file()]
    for logger in loggers:
        if isinstance(logger, MLFlowLogger):
            for path in files:
                logger.experiment.log_artifact(logger.run_id, str(path))
        elif isinstance(logger, WandbLogger):
            for path in files:
                logger.experiment.save(str(path), base_path=str(output_dir), policy="now")
