"""The end of a fit: the final weights validated, competing for best.ckpt like every validation
before them, and saved as checkpoints/final.ckpt (nnU-Net's checkpoint_final: what the commands
that read a run use by default; only a finished run has one, while last.ckpt is also the state of
a run stopped half-way)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from segnet.checkpoints.paths import FINAL
from segnet.checkpoints.writing import rewrite_callback_state
from segnet.training.module import SegmentationModule


@dataclass(frozen=True)
class FinalWeights:
    scores: dict[str, Any]  # the final validation's logged values (val/dice_mean, val/dice_<class>)
    final_path: Path
    best_callback: ModelCheckpoint | None  # best.ckpt's: it monitors the validation Dice
    best_path: Path | None
    last_path: Path | None


def validate_final_weights(trainer: L.Trainer, module: SegmentationModule, datamodule: L.LightningDataModule,
                           output_dir: Path) -> FinalWeights:
    """Validates the weights the fit ended with, lets them compete for best.ckpt and saves them as
    final.ckpt."""
    best = next((c for c in trainer.checkpoint_callbacks if c.monitor), None)
    last = next((c for c in trainer.checkpoint_callbacks if not c.monitor), None)
    last_path = Path(last.format_checkpoint_name({})) if last else None
    # The final weights, as last.ckpt holds them at the fit's end: named, since without a path
    # Lightning validates the newest hpc_ckpt_*.ckpt under SLURM (the weights at a preemption).
    final_weights = str(last_path) if last_path and last_path.is_file() else None
    scores = trainer.validate(module, datamodule=datamodule, ckpt_path=final_weights, verbose=False,
                              weights_only=True)[0]
    if best is not None and final_weights is not None:
        compete_for_best(trainer, best, scores.get(best.monitor), last_path)
    final_path = output_dir / "checkpoints" / FINAL
    trainer.save_checkpoint(final_path, weights_only=True)
    best_path = Path(best.best_model_path) if best and best.best_model_path else None
    return FinalWeights(scores, final_path, best, best_path, last_path)


def compete_for_best(trainer: L.Trainer, checkpoint: ModelCheckpoint, score: float | None, last_path: Path) -> None:
    """The final validation competes for best.ckpt like every validation during the fit: the final
    weights become best.ckpt when they score better than the best so far (higher, or lower for a
    monitor with mode: min), or when nothing was scored before (a fit that ended before its first
    validation). last.ckpt learns the new best,
    so that a run resumed from it to train longer measures its validations against it."""
    if score is None or math.isnan(float(score)):
        return
    best = checkpoint.best_model_score
    if best is not None and not math.isnan(float(best)):
        better = float(score) < float(best) if checkpoint.mode == "min" else float(score) > float(best)
        if not better:
            return
    path = checkpoint.format_checkpoint_name({})
    checkpoint.best_model_score, checkpoint.best_model_path = torch.tensor(float(score)), path
    checkpoint.best_k_models = {path: checkpoint.best_model_score}
    checkpoint.kth_best_model_path, checkpoint.kth_value = path, checkpoint.best_model_score
    trainer.save_checkpoint(path, weights_only=False)  # whole, as ModelCheckpoint writes best.ckpt
    if trainer.is_global_zero:
        rewrite_callback_state(last_path, checkpoint)
    trainer.strategy.barrier("compete_for_best")
