"""metrics.json: what a finished run reports. Its final validation's scores (mean, per class, per
case and class for the paired comparisons), what they describe, the best checkpoint and how it was
chosen, the step timer's summary, peak memory, sizes, versions and the command."""

from __future__ import annotations

import platform
import resource
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import lightning as L
import torch
from omegaconf import DictConfig

from segnet.checkpoints.reading import saved_step
from segnet.topology_metrics import TOPOLOGY_METRICS
from segnet.training.callbacks import StepTimer
from segnet.training.final_weights import FinalWeights
from segnet.training.module import CaseScores, SegmentationModule
from segnet.training.postprocessing_trials import PostprocessingTrials

BEST_SELECTION = ("the highest val/dice_mean of all validations, the final one included, chosen on the same "
                  "validation cases it is scored on: an optimistic estimate")


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


def _score(value: Any) -> float:
    return float(value) if value is not None else float("nan")


def per_case_key(metric: str) -> str:
    """metrics.json's key of one metric's final-validation scores per case: val_dice_per_case,
    val_betti0_error_per_case, ..."""
    return f"val_{metric.lower().replace(' ', '_')}_per_case"


def by_class_name(per_case: dict[str, list[float]], class_names: list[str]) -> dict[str, dict[str, float]]:
    """{case: scores per foreground class} as {case: {class name: score}}, cases in name order."""
    return {case: dict(zip(class_names[1:], map(_score, scores), strict=True))
            for case, scores in sorted(per_case.items())}


def postprocessing_trials(trainer: L.Trainer, class_names: list[str]) -> dict[str, Any]:
    """The final validation's Dice after each postprocessing rule, per case and class, where the run
    recorded them (PostprocessingTrials, which experiment=ablation_recipe adds)."""
    trials = next((c for c in trainer.callbacks if isinstance(c, PostprocessingTrials)), None)
    if trials is None:
        return {}
    by_trial: dict[str, CaseScores] = {}
    for case, scores in trials.per_case.items():
        for trial, per_class in scores.items():
            by_trial.setdefault(trial, {})[case] = per_class
    # the same cases' Dice after each candidate rule, for the recipe ablation
    return {"val_dice_postprocessed_per_case": {trial: by_class_name(per_case, class_names)
                                                for trial, per_case in by_trial.items()}}


def checkpoint_step(path: Path) -> int | None:
    """The optimizer step a checkpoint was saved at (memory-mapped: the weights are not read)."""
    if not path.is_file():
        return None
    return saved_step(path)


def run_metrics(cfg: DictConfig, trainer: L.Trainer, module: SegmentationModule, final: FinalWeights,
                fit_seconds: float, backend: str) -> dict[str, Any]:
    """The run's metrics.json, after its final validation."""
    timer = next(c for c in trainer.callbacks if isinstance(c, StepTimer))
    memory, memory_kind = peak_memory_mb(module.device)
    checkpoint = final.best_callback
    best_path = final.best_path
    return {
        "val_dice_mean": _score(final.scores.get("val/dice_mean")),
        # what every val_* score below describes: the final weights, on the validation cases
        "scored": {"checkpoint": str(final.final_path), "step": trainer.global_step, "tta": False,
                   "postprocessing": "none"},
        "best_val_dice_mean": _score(checkpoint.best_model_score if checkpoint else None),
        "best_checkpoint": {"path": str(best_path or ""), "step": checkpoint_step(best_path) if best_path else None,
                            "selection": BEST_SELECTION},
        "val_dice_per_class": {name: _score(final.scores.get(f"val/dice_{name}")) for name in module.class_names[1:]},
        # per validation case and class, for paired comparisons of runs (segnet.evaluation.ablation);
        # HD95 and NSD in mm, as evaluation computes them
        **{per_case_key(metric): by_class_name(module.per_case(metric), module.class_names)
           for metric in ("Dice", "HD95", "NSD", *(TOPOLOGY_METRICS if module.topology else ()))},
        **postprocessing_trials(trainer, module.class_names),
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
            "final": str(final.final_path),
            "best": str(best_path or ""),
            "last": str(final.last_path) if final.last_path and final.last_path.is_file() else "",
        },
        "resumed_from": cfg.ckpt_path,
        "versions": versions(),
        "command": " ".join(sys.argv),
    }
