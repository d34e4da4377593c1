"""From a composed configuration to a finished run: check it, settle what the run trains with,
build the objects, fit, validate the final weights and write metrics.json into the run folder.
train.py calls train(); nothing here parses argv."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import lightning as L
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from segnet.checkpoints.reading import refusing_unsafe
from segnet.checkpoints.writing import AtomicCheckpointIO
from segnet.cluster import is_first_process
from segnet.errors import ConfigError, DatasetError
from segnet.files import write_json
from segnet.model.loss_terms import required_maps
from segnet.planning.plan import record_plan
from segnet.training.checks import check_training_config, resolve_run_backend
from segnet.training.data_arguments import check_data_keys, data_module_arguments
from segnet.training.final_weights import validate_final_weights
from segnet.training.fine_tuning import initialize_from
from segnet.training.module import SegmentationModule
from segnet.training.report import reset_peak_memory, run_metrics
from segnet.training.resume import SECTIONS, check_same_run
from segnet.training.run_config import run_config, write_run_config
from segnet.training.tracking import build_loggers, publish_configuration, publish_run

log = logging.getLogger(__name__)


def build_module(cfg: DictConfig, backend: str) -> SegmentationModule:
    # Plain dicts, resolved: the checkpoint's hyperparameters must not depend on Hydra or on
    # dataset.json still being where it was.
    sections = {key: OmegaConf.to_container(cfg[key], resolve=True) for key in SECTIONS}
    return SegmentationModule(**sections, backend=backend, compile=bool(cfg.compile),
                              precision=str(cfg.trainer.get("precision", "32-true")))


def instantiate_data(data: DictConfig, maps: list[str] | None = None, backend: str = "auto") -> L.LightningDataModule:
    """The data module from its arguments in the data section (a key that nothing reads stops the
    run), its crops carrying `maps` (the label's derived maps the loss reads), a cascade's first
    stage predicting with the edge op's `backend`; a ConfigError or DatasetError it raises reaches
    the user as itself, not wrapped in Hydra's InstantiationException."""
    first_stage = {"first_stage_backend": backend} if data.get("previous_stage") else {}
    try:
        return instantiate(data_module_arguments(data), maps=maps or [], **first_stage)
    except InstantiationException as error:
        if isinstance(error.__cause__, (ConfigError, DatasetError)):
            raise error.__cause__ from None
        raise


def train(composed: DictConfig) -> dict[str, Any]:
    """Fit, validate the final weights, and return (and write) the run's metrics."""
    check_training_config(composed)
    check_data_keys(composed.data)
    backend = resolve_run_backend(composed)
    L.seed_everything(composed.seed, workers=True)
    run = run_config(composed)
    cfg, output_dir = run.config, Path(run.config.paths.output_dir)

    datamodule = instantiate_data(cfg.data, required_maps(OmegaConf.to_container(cfg.loss, resolve=True)),
                                  cfg.op.backend)
    module = build_module(cfg, backend)
    if cfg.ckpt_path is not None:  # before this run writes into the folder
        check_same_run(cfg.ckpt_path, dict(module.hparams), run.given_ckpt_path)
    elif cfg.model.get("init_from") is not None:  # fine-tuning: another run's weights, a new schedule
        initialize_from(module.net, cfg.model.init_from, module.class_names, module.regions)
    record_plan(run.plan, output_dir)
    write_run_config(cfg, output_dir)
    if getattr(datamodule, "split", None) is not None and is_first_process():
        write_json(output_dir / "splits.json", datamodule.split.to_json())

    callbacks = [instantiate(c) for c in cfg.callbacks.values()]
    trainer: L.Trainer = instantiate(
        cfg.trainer, callbacks=callbacks, logger=build_loggers(cfg), profiler=instantiate(cfg.get("profiler")),
        plugins=[AtomicCheckpointIO()],
    )
    publish_configuration(trainer.loggers, cfg)
    reset_peak_memory()
    start = time.perf_counter()
    # A stop (SIGTERM, SIGINT) ends the fit in Lightning's SIGTERMException, a SystemExit whose code
    # segnet.training.signals.GracefulStop chose, after it saved last.ckpt and said how to resume.
    with refusing_unsafe(cfg.ckpt_path):
        trainer.fit(module, datamodule=datamodule, ckpt_path=cfg.ckpt_path, weights_only=True)
    fit_seconds = time.perf_counter() - start
    final = validate_final_weights(trainer, module, datamodule, output_dir)

    metrics = run_metrics(cfg, trainer, module, final, fit_seconds, backend)
    if trainer.is_global_zero:
        write_json(output_dir / "metrics.json", metrics)
        # The number a user compares with segnet-evaluate's, which mirrors by default: said why they differ.
        log.info("val Dice %.4f (best %.4f), without test-time mirroring (segnet-evaluate mirrors, tta=true, and "
                 "scores higher); metrics in %s", metrics["val_dice_mean"], metrics["best_val_dice_mean"],
                 output_dir / "metrics.json")
        publish_run(trainer.loggers, output_dir)
    return metrics
