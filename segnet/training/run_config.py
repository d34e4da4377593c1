"""The configuration a run trains with: the composed one (Hydra's, left as it saved it in
.hydra/config.yaml) with what the run decides on top of it. The checkpoint it resumes and the run
folder that goes with it, the plan (spacing, orientation, normalization, patch and batch) and a
fine-tuned run's source geometry, the network's size for the patch, where augmentation runs.
The run folder keeps it resolved as config.yaml: the configuration that trained."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from segnet.cluster import is_first_process, trainer_uses_gpu
from segnet.config import RUN_CONFIG
from segnet.files import write_text
from segnet.planning.plan import plan_for_run, size_network
from segnet.training.fine_tuning import fine_tuning_plan
from segnet.training.resume import check_fresh_start, continue_in_run_folder, resume_from


@dataclass(frozen=True)
class RunConfig:
    config: DictConfig  # this run's own copy, everything decided
    plan: dict[str, Any] | None  # what plans.json records (None for generated data)
    given_ckpt_path: str | None  # ckpt_path as the command line gave it (auto, a path or None)


def run_config(composed: DictConfig) -> RunConfig:
    """The configuration this run trains with; `composed` stays as Hydra made it."""
    cfg = copy.deepcopy(composed)
    given = cfg.ckpt_path
    cfg.ckpt_path = resume_from(cfg)
    if cfg.ckpt_path is not None:
        continue_in_run_folder(cfg)
    else:
        check_fresh_start(Path(cfg.paths.output_dir))
    plan = plan_for_run(cfg, Path(cfg.paths.output_dir))  # dataset folders: spacing, orientation, normalization,
    # patch, batch; model.init_from: the source run's spacing and normalization (an nnU-Net model's network)
    plan = fine_tuning_plan(cfg, plan, composed.data)
    size_network(cfg.model, cfg.data)  # model=resenc: channels and strides for this run's patch
    if cfg.data.get("augment_on") == "auto":  # batched on a GPU; in the loader's workers on the CPU
        cfg.data.augment_on = "device" if trainer_uses_gpu(cfg.trainer) else "workers"
    return RunConfig(cfg, plan, given)


def write_run_config(cfg: DictConfig, output_dir: Path) -> None:
    """<run>/config.yaml, resolved (written by the first process)."""
    if is_first_process():
        write_text(output_dir / RUN_CONFIG, OmegaConf.to_yaml(cfg, resolve=True))
