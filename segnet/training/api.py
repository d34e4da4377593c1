"""From a composed configuration to a finished run: check it, build the objects, fit, validate,
and write metrics.json into the run folder. train.py calls train(); nothing here parses argv."""

from __future__ import annotations

import logging
import math
import platform
import resource
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

import ops
from segnet.cluster import is_first_process, trainer_uses_gpu
from segnet.data.dataset_json import describe_dataset
from segnet.errors import ConfigError, DatasetError
from segnet.files import write_json
from segnet.inference.loading import FINAL, refusing_unsafe
from segnet.inference.postprocessing import TRIALS
from segnet.model.loss_terms import required_maps
from segnet.planning.api import plan_for_run, record_plan, size_network
from segnet.topology import TOPOLOGY_METRICS
from segnet.training.callbacks import StepTimer
from segnet.training.checkpoints import AtomicCheckpointIO, rewrite_callback_state
from segnet.training.fine_tuning import fine_tuning_plan, initialize_from
from segnet.training.module import SegmentationModule, postprocessed_dice
from segnet.training.resume import SECTIONS, check_fresh_start, check_same_run, continue_in_run_folder, resume_from

log = logging.getLogger(__name__)
BEST_SELECTION = ("the highest val/dice_mean of all validations, the final one included, chosen on the same "
                  "validation cases it is scored on: an optimistic estimate")


def resolve_run_backend(cfg: DictConfig) -> str:
    """The op backend this run will use, or a ConfigError saying what to use instead."""
    backend = cfg.op.backend
    if backend not in ops.BACKENDS:
        raise ConfigError(f"op.backend={backend} is not a backend; use one of {', '.join(ops.BACKENDS)}")
    gpu = trainer_uses_gpu(cfg.trainer)
    if gpu and not torch.cuda.is_available():
        raise ConfigError(
            f"trainer.accelerator={cfg.trainer.accelerator} needs a GPU but none is visible; use trainer=cpu"
        )
    if backend == "cuda" and not gpu:
        reason = "no GPU is visible" if not torch.cuda.is_available() else "the trainer runs on the CPU"
        raise ConfigError(f"op.backend=cuda needs a GPU trainer but {reason}; use op.backend=cpp or op.backend=auto")
    if backend == "cpp" and gpu:
        raise ConfigError(
            "op.backend=cpp runs on the CPU but the trainer uses the GPU; use op.backend=cuda or op.backend=auto "
            "(or trainer=cpu)"
        )
    device = torch.device("cuda" if gpu else "cpu")
    resolved = ops.resolve_backend(backend, device)
    log.info("edge op backend: %s (requested %s, device %s)", resolved, backend, device.type)
    return resolved


def uses_ddp(trainer_cfg: DictConfig) -> bool:
    """Whether the trainer starts several processes (devices may be a count, a list or "auto")."""
    if "ddp" not in str(trainer_cfg.get("strategy", "")):
        return False
    devices = trainer_cfg.get("devices", 1)
    if OmegaConf.is_list(devices):
        return len(devices) * int(trainer_cfg.get("num_nodes", 1)) > 1
    if not str(devices).isdigit():
        return True  # "auto" or -1: as many as there are
    return int(devices) * int(trainer_cfg.get("num_nodes", 1)) > 1


def check_launcher(cfg: DictConfig) -> None:
    """Multirun with DDP works only where every rank is started by the job system (SLURM): under
    another launcher, Lightning starts the other ranks again from the original command line,
    -m included, and the sweep runs over and over."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or not uses_ddp(cfg.trainer):
        return
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode == RunMode.MULTIRUN and "SlurmLauncher" not in str(hydra_cfg.launcher.get("_target_", "")):
        raise ConfigError(
            "multirun (-m) with trainer=ddp needs hydra/launcher=slurm (each run a SLURM job whose tasks are the "
            "ranks); with this launcher Lightning would restart the other ranks from the original command line, "
            "-m included. Use hydra/launcher=slurm, or start each configuration as its own run."
        )


def check_data_config(data: DictConfig) -> None:
    if "root" in data.keys() and OmegaConf.is_missing(data, "root"):  # `in` skips missing values
        raise ConfigError(
            f"data.root is required for data={data.name}: point it at a dataset folder with dataset.json, "
            "imagesTr and labelsTr, e.g. data.root=/data/Task04_Hippocampus"
        )
    if "root" in data.keys():
        describe_dataset(str(data.root))  # its DatasetError, before the config's resolvers wrap it
    if len(data.class_names) != data.num_classes:
        raise ConfigError(
            f"data.class_names has {len(data.class_names)} names but data.num_classes={data.num_classes}; "
            "give one name per class, background first"
        )
    if data.spatial_dims not in (2, 3):
        raise ConfigError(f"data.spatial_dims={data.spatial_dims}; use 2 or 3")


def reset_peak_memory() -> None:
    """Start peak-memory tracking afresh, so runs of one sweep process are measured apart."""
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    try:  # Linux: "5" resets the process's peak resident set size (VmHWM)
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak_memory_mb(device: torch.device) -> tuple[float, str]:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20, "cuda_max_allocated"
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024, "process_peak_rss"
    # ru_maxrss (KiB on Linux) cannot be reset: the peak since the process started.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "process_peak_rss_since_start"


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in ("segnet", "torch", "lightning", "monai", "hydra-core"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def build_module(cfg: DictConfig, backend: str) -> SegmentationModule:
    # Plain dicts, resolved: the checkpoint's hyperparameters must not depend on Hydra or on
    # dataset.json still being where it was.
    sections = {key: OmegaConf.to_container(cfg[key], resolve=True) for key in SECTIONS}
    return SegmentationModule(**sections, backend=backend, compile=bool(cfg.compile),
                              precision=str(cfg.trainer.get("precision", "32-true")))


def instantiate_data(data: DictConfig, maps: list[str] | None = None) -> L.LightningDataModule:
    """The data module, its crops carrying `maps` (the label's derived maps the loss reads); a
    ConfigError or DatasetError it raises reaches the user as itself, not wrapped in Hydra's
    InstantiationException."""
    try:
        return instantiate(data, maps=maps or [])
    except InstantiationException as error:
        if isinstance(error.__cause__, (ConfigError, DatasetError)):
            raise error.__cause__ from None
        raise


def _score(value: Any) -> float:
    return float(value) if value is not None else float("nan")


def per_case_key(metric: str) -> str:
    """metrics.json's key of one metric's final-validation scores per case: val_dice_per_case,
    val_betti0_error_per_case, ..."""
    return f"val_{metric.lower().replace(' ', '_')}_per_case"


def per_case_scores(module: SegmentationModule, metric: str) -> dict[str, dict[str, float]]:
    """The final validation's {case: {class name: score}} of one metric, cases in name order."""
    return {case: dict(zip(module.class_names[1:], map(_score, scores), strict=True))
            for case, scores in sorted(module.per_case(metric).items())}


def compete_for_best(trainer: L.Trainer, checkpoint, score: float | None, last_path: Path) -> None:
    """The final validation competes for best.ckpt like every validation during the fit: the final
    weights become best.ckpt when they score higher than the best so far, or when nothing was
    scored before (a fit that ended before its first validation). last.ckpt learns the new best,
    so that a run resumed from it to train longer measures its validations against it."""
    if score is None or math.isnan(float(score)):
        return
    best = checkpoint.best_model_score
    if best is not None and not math.isnan(float(best)) and float(score) <= float(best):
        return
    path = checkpoint.format_checkpoint_name({})
    checkpoint.best_model_score, checkpoint.best_model_path = torch.tensor(float(score)), path
    checkpoint.best_k_models = {path: checkpoint.best_model_score}
    checkpoint.kth_best_model_path, checkpoint.kth_value = path, checkpoint.best_model_score
    trainer.save_checkpoint(path, weights_only=False)  # whole, as ModelCheckpoint writes best.ckpt
    if trainer.is_global_zero:
        rewrite_callback_state(last_path, checkpoint)
    trainer.strategy.barrier("compete_for_best")


def checkpoint_step(path: Path) -> int | None:
    """The optimizer step a checkpoint was saved at (memory-mapped: the weights are not read)."""
    if not path.is_file():
        return None
    return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["global_step"])


def train(cfg: DictConfig) -> dict[str, Any]:
    """Fit, validate the final weights, and return (and write) the run's metrics."""
    check_data_config(cfg.data)
    check_launcher(cfg)
    given = cfg.ckpt_path
    cfg.ckpt_path = resume_from(cfg)
    if cfg.ckpt_path is not None:
        continue_in_run_folder(cfg)
    else:
        check_fresh_start(Path(cfg.paths.output_dir))
    backend = resolve_run_backend(cfg)
    L.seed_everything(cfg.seed, workers=True)
    output_dir = Path(cfg.paths.output_dir)

    plan = plan_for_run(cfg, output_dir)  # dataset folders: spacing, orientation, normalization, patch, batch
    plan = fine_tuning_plan(cfg, plan)  # model.init_from: the source run's spacing and normalization
    size_network(cfg.model, cfg.data)  # model=resenc: channels and strides for this run's patch
    if cfg.data.get("augment_on") == "auto":  # batched on a GPU; in the loader's workers on the CPU
        cfg.data.augment_on = "device" if trainer_uses_gpu(cfg.trainer) else "workers"
    datamodule = instantiate_data(cfg.data, required_maps(OmegaConf.to_container(cfg.loss, resolve=True)))
    module = build_module(cfg, backend)
    if cfg.ckpt_path is not None:  # before this run writes into the folder
        check_same_run(cfg.ckpt_path, dict(module.hparams), given)
    elif cfg.model.get("init_from") is not None:  # fine-tuning: another run's weights, a new schedule
        initialize_from(module.net, cfg.model.init_from, module.class_names)
    record_plan(plan, output_dir)
    if getattr(datamodule, "split", None) is not None and is_first_process():
        write_json(output_dir / "splits.json", datamodule.split.to_json())
    callbacks = [instantiate(c) for c in cfg.callbacks.values()]
    trainer: L.Trainer = instantiate(
        cfg.trainer, callbacks=callbacks, logger=instantiate(cfg.logger), profiler=instantiate(cfg.get("profiler")),
        plugins=[AtomicCheckpointIO()],
    )
    reset_peak_memory()
    start = time.perf_counter()
    # A stop (SIGTERM, SIGINT) ends the fit in Lightning's SIGTERMException, a SystemExit whose code
    # segnet.training.signals.GracefulStop chose, after it saved last.ckpt and said how to resume.
    with refusing_unsafe(cfg.ckpt_path):
        trainer.fit(module, datamodule=datamodule, ckpt_path=cfg.ckpt_path, weights_only=True)
    fit_seconds = time.perf_counter() - start
    # best.ckpt's ModelCheckpoint monitors the validation Dice; last.ckpt's monitors nothing
    checkpoint = next((c for c in trainer.checkpoint_callbacks if c.monitor), None)
    last = next((c for c in trainer.checkpoint_callbacks if not c.monitor), None)
    last_path = Path(last.format_checkpoint_name({})) if last else None
    # The final weights, as last.ckpt holds them at the fit's end: named, since without a path
    # Lightning validates the newest hpc_ckpt_*.ckpt under SLURM (the weights at a preemption).
    final_weights = str(last_path) if last_path and last_path.is_file() else None
    final = trainer.validate(module, datamodule=datamodule, ckpt_path=final_weights, verbose=False,
                             weights_only=True)[0]
    if checkpoint is not None and final_weights is not None:
        compete_for_best(trainer, checkpoint, final.get(checkpoint.monitor), last_path)
    # nnU-Net's checkpoint_final: the weights the commands that read a run use by default; only
    # a finished run has one (last.ckpt is also the state of a run stopped half-way)
    final_path = output_dir / "checkpoints" / FINAL
    trainer.save_checkpoint(final_path, weights_only=True)
    best_path = Path(checkpoint.best_model_path) if checkpoint and checkpoint.best_model_path else None
    timer = next(c for c in callbacks if isinstance(c, StepTimer))
    memory, memory_kind = peak_memory_mb(module.device)
    metrics = {
        "val_dice_mean": _score(final.get("val/dice_mean")),
        # what every val_* score below describes: the final weights, on the validation cases
        "scored": {"checkpoint": str(final_path), "step": trainer.global_step, "tta": False,
                   "postprocessing": "none"},
        "best_val_dice_mean": _score(checkpoint.best_model_score if checkpoint else None),
        "best_checkpoint": {"path": str(best_path or ""), "step": checkpoint_step(best_path) if best_path else None,
                            "selection": BEST_SELECTION},
        "val_dice_per_class": {name: _score(final.get(f"val/dice_{name}")) for name in module.class_names[1:]},
        # per validation case and class, for paired comparisons of runs (segnet.evaluation.ablation);
        # HD95 and NSD in mm, as evaluation computes them
        **{per_case_key(metric): per_case_scores(module, metric) for metric in ("Dice", "HD95", "NSD")},
        **{per_case_key(metric): per_case_scores(module, metric) for metric in TOPOLOGY_METRICS if module.topology},
        # the same cases' Dice after each candidate postprocessing rule, for the recipe ablation
        "val_dice_postprocessed_per_case": {trial: per_case_scores(module, postprocessed_dice(trial))
                                            for trial in TRIALS[1:]},
        **timer.summary(),
        "peak_memory_mb": memory,
        "parameters": sum(p.numel() for p in module.net.parameters()),
        "peak_memory_kind": memory_kind,
        "backend": backend,
        "backend_requested": cfg.op.backend,
        "compile": bool(cfg.compile),
        "epochs": trainer.current_epoch,
        "global_step": trainer.global_step,
        "fit_seconds": fit_seconds,
        "validation_share_of_fit": timer.validation_seconds / fit_seconds if fit_seconds else float("nan"),
        "checkpoints": {
            "final": str(final_path),
            "best": str(best_path or ""),
            "last": str(last_path) if last_path and last_path.is_file() else "",
        },
        "resumed_from": cfg.ckpt_path,
        "versions": versions(),
        "command": " ".join(sys.argv),
    }
    if trainer.is_global_zero:
        write_json(output_dir / "metrics.json", metrics)
        log.info("val Dice %.4f (best %.4f); metrics in %s", metrics["val_dice_mean"], metrics["best_val_dice_mean"],
                 output_dir / "metrics.json")
    return metrics
