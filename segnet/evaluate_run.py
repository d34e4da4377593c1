"""From an evaluation config to the reports: what scripts/evaluate.py calls."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

import ops

from .checkpoint_loading import load_module
from .data.dataset_json import describe_dataset
from .errors import ConfigError
from .evaluation import Evaluator, check_compatible, select_cases, summarize, write_reports

log = logging.getLogger(__name__)


def load_for_inference(checkpoint: Path, device_name: str, backend_name: str):
    """A checkpoint's model on the requested device, with the op backend that runs there."""
    device = evaluation_device(device_name)
    try:
        backend = ops.resolve_backend(backend_name, device)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    return load_module(checkpoint, map_location=device, backend=backend, compile=False)


def evaluation_device(requested: str) -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but no GPU is visible; use device=cpu or device=auto")
    if requested not in ("cpu", "cuda"):
        raise ConfigError(f"device={requested}; use auto, cpu or cuda")
    return torch.device(requested)


def evaluate(cfg: DictConfig) -> dict[str, Any]:
    if OmegaConf.is_missing(cfg, "ckpt_path"):
        raise ConfigError("ckpt_path is required: point it at a training run's checkpoints/best.ckpt")
    checkpoint = Path(cfg.ckpt_path)
    if not checkpoint.is_file():
        raise ConfigError(f"ckpt_path={checkpoint} is not a file; point it at a training run's checkpoints/best.ckpt")
    if OmegaConf.is_missing(cfg.data, "root"):
        raise ConfigError("data.root is required: point it at the dataset folder (dataset.json, imagesTr, labelsTr)")
    description = describe_dataset(str(cfg.data.root))
    module = load_for_inference(checkpoint, cfg.device, cfg.op.backend)
    check_compatible(module, description)
    run_splits = checkpoint.resolve().parent.parent / "splits.json"  # <run>/checkpoints/<name>.ckpt
    cases = select_cases(description, cfg.data.split, module.hparams.data, run_splits)
    output_dir = Path(cfg.paths.output_dir)
    log.info("evaluating %s on %d %s case(s) of %s (backend %s, tta %s)", checkpoint, len(cases), cfg.data.split,
             description.root, module.hparams.backend, cfg.tta)
    results = Evaluator(module, output_dir, tta=cfg.tta, nsd_tolerance_mm=float(cfg.nsd_tolerance_mm)).run(cases)
    summary = summarize(results, list(module.hparams.data["class_names"]))
    write_reports(summary, output_dir)
    log.info("foreground mean Dice %.4f, HD95 %.2f mm; reports in %s", summary["foreground_mean"]["Dice"],
             summary["foreground_mean"]["HD95"], output_dir)
    return summary
