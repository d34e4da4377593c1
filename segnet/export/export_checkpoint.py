"""From an export config to a package on disk, checked to run on its own: what segnet-export
runs."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from ops import standalone
from segnet.checkpoints.paths import one_checkpoint
from segnet.errors import ConfigError
from segnet.export.exporter import FORMATS, export_network, metadata_path
from segnet.export.onnx_export import ONNX, export_onnx
from segnet.inference.loading import load_for_inference
from segnet.progress import step

log = logging.getLogger(__name__)


def export_command(cfg: DictConfig) -> dict[str, Any]:
    if cfg.format not in (*FORMATS, ONNX):
        raise ConfigError(f"format={cfg.format}; use one of {', '.join((*FORMATS, ONNX))}")
    checkpoint = one_checkpoint(cfg, "an export")
    if cfg.format == ONNX:
        return onnx_command(checkpoint, Path(cfg.output))
    if cfg.device == "auto":
        raise ConfigError("device=auto: name the device the package will run on, device=cpu or device=cuda")
    # The fused op for that device: the export keeps it as one segnet_ops.edge_enhance node.
    model = exportable(checkpoint, cfg.device, "cuda" if cfg.device == "cuda" else "cpp")
    output = Path(cfg.output)
    metadata = export_network(model, output, cfg.format)
    log.info("%s for %s in %s (export %.1f s, packaging %.1f s; %d edge op node(s)); prediction settings in %s",
             cfg.format, cfg.device, output, metadata["seconds"]["export"], metadata["seconds"]["package"],
             metadata["edge_op_nodes"], metadata_path(output))
    with step("running it on its own in a fresh process (torch and the op library alone)"):
        seconds = run_on_its_own(output)
    log.info("runs without the training code: torch + ops import %.2f s, op library %.3f s, package %.2f s, "
             "first call %.3f s", seconds["import_torch_and_ops"], seconds["load_op_library"], seconds["load_package"],
             seconds["first_call"])
    return {**metadata, "standalone_seconds": seconds}


def exportable(checkpoint: Path, device: str, backend: str):
    """The checkpoint's model, which an export can predict with alone (no cascade)."""
    model = load_for_inference(checkpoint, device, backend)
    if model.settings.previous_stage:
        raise ConfigError(f"{checkpoint} is a cascade, whose input includes its first stage's label map: an export "
                          "does not predict one yet; predict with segnet-predict ckpt_path=...")
    return model


def onnx_command(checkpoint: Path, output: Path) -> dict[str, Any]:
    """The checkpoint's network as an ONNX file (for any device: exported on the CPU from the op's
    plain-torch form), checked by onnx.checker."""
    if output.suffix != ".onnx":
        raise ConfigError(f"format=onnx writes an ONNX file, not output={output}: give output=PATH.onnx")
    model = exportable(checkpoint, "cpu", "python")
    metadata = export_onnx(model, output)
    log.info("onnx in %s (export %.1f s, checks %.1f s; operators %s); prediction settings in %s", output,
             metadata["seconds"]["export"], metadata["seconds"]["package"], ", ".join(metadata["operators"]),
             metadata_path(output))
    return metadata


def run_on_its_own(package: Path) -> dict[str, float]:
    """ops/standalone.py's times for the package, in a fresh process with torch and the op library
    alone, as the target machine will run it; RuntimeError with its output if it fails."""
    ran = subprocess.run(standalone.command(package), capture_output=True, text=True)
    if ran.returncode != 0:
        how = (f"killed by {signal.Signals(-ran.returncode).name}" if ran.returncode < 0
               else f"exit status {ran.returncode}")
        raise RuntimeError(f"{package} does not run on its own ({how}):\n{ran.stderr[-3000:]}")
    return json.loads(ran.stdout.strip().splitlines()[-1])["seconds"]
