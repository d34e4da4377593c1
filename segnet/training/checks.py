"""Checks of a training configuration that stop a run before anything is built: the data section
and the folds it can make, the launcher a DDP sweep needs, and the op backend for the trainer's
device. segnet-train runs check_training_config before it imports the training code (Lightning,
MONAI), so these mistakes are answered in a few seconds; this module imports neither."""

from __future__ import annotations

import logging

import torch
from omegaconf import DictConfig, OmegaConf

import ops
from segnet.cluster import trainer_uses_gpu
from segnet.data.dataset_json import describe_dataset
from segnet.data.splits import choose_split
from segnet.errors import ConfigError
from segnet.training.tracking import check_loggers

log = logging.getLogger(__name__)


def check_training_config(cfg: DictConfig) -> None:
    """What a run's configuration gets wrong that is known before anything is imported or built."""
    check_data_config(cfg.data)
    check_launcher(cfg)
    check_devices(cfg)
    check_loggers(cfg)


def check_devices(cfg: DictConfig) -> None:
    """The op backend asked for fits the trainer's device, and that device is here."""
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


def resolve_run_backend(cfg: DictConfig) -> str:
    """The op backend this run will use, or a ConfigError saying what to use instead."""
    check_devices(cfg)
    device = torch.device("cuda" if trainer_uses_gpu(cfg.trainer) else "cpu")
    resolved = ops.resolve_backend(cfg.op.backend, device)
    log.info("edge op backend: %s (requested %s, device %s)", resolved, cfg.op.backend, device.type)
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
        description = describe_dataset(str(data.root))  # its DatasetError, before the config's resolvers wrap it
        if "fold" in data.keys():  # the data module's split, made here to name a fold it cannot make
            choose_split(description, data.fold, data.num_folds, data.split_seed)
    if len(data.class_names) != data.num_classes:
        raise ConfigError(
            f"data.class_names has {len(data.class_names)} names but data.num_classes={data.num_classes}; "
            "give one name per class, background first"
        )
    if data.spatial_dims not in (2, 3):
        raise ConfigError(f"data.spatial_dims={data.spatial_dims}; use 2 or 3")
