"""From an export config to a package on disk: what scripts/export.py calls."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from .errors import ConfigError
from .evaluate_run import load_for_inference
from .exporting import FORMATS, export_module, metadata_path

log = logging.getLogger(__name__)


def export(cfg: DictConfig) -> dict[str, Any]:
    if OmegaConf.is_missing(cfg, "ckpt_path"):
        raise ConfigError("ckpt_path is required: python scripts/export.py ckpt_path=RUN/checkpoints/best.ckpt")
    if cfg.format not in FORMATS:
        raise ConfigError(f"format={cfg.format}; use one of {', '.join(FORMATS)}")
    checkpoint = Path(cfg.ckpt_path)
    if not checkpoint.is_file():
        raise ConfigError(f"ckpt_path={checkpoint} is not a file; point it at a training run's checkpoints/best.ckpt")
    if cfg.device == "auto":
        raise ConfigError("device=auto: name the device the package will run on, device=cpu or device=cuda")
    # The fused op for that device: the export keeps it as one segnet_ops.edge_enhance node.
    module = load_for_inference(checkpoint, cfg.device, "cuda" if cfg.device == "cuda" else "cpp")
    output = Path(cfg.output)
    metadata = export_module(module, output, cfg.format, module.device)
    log.info("%s for %s in %s (export %.1f s, packaging %.1f s; %d edge op node(s)); prediction settings in %s",
             cfg.format, cfg.device, output, metadata["seconds"]["export"], metadata["seconds"]["package"],
             metadata["edge_op_nodes"], metadata_path(output))
    return metadata
