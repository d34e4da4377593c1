"""The recipe ablation's "postprocessing on" scores, recorded only where a run asks for them
(experiment=ablation_recipe adds this callback): in the final validation, each case's Dice after
each candidate connected-component rule of segnet-postprocess, on the same prediction as its plain
Dice, so that the ablation report pairs postprocessing on with off per case."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn

from segnet.inference.component_rules import TRIALS, case_scores
from segnet.inference.windows import plain
from segnet.training.module import CaseScores, SegmentationModule, gather_from_ranks


class PostprocessingTrials(L.Callback):
    def __init__(self) -> None:
        self._cases: dict[str, CaseScores] = {}  # this rank's cases
        self.per_case: dict[str, CaseScores] = {}  # case -> {rule: Dice per class}, every rank's, after validate

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: SegmentationModule, outputs: torch.Tensor,
                                batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> None:
        if trainer.state.fn != TrainerFn.VALIDATING or pl_module.regions is not None:
            # the validations within fit pick best.ckpt by Dice alone; a region's rule is tried on top of
            # those kept before it, over every case again (segnet.postprocessing.decide), which one
            # validation's batches cannot do
            return
        classes = len(pl_module.class_names)
        for name, prediction, label in zip(batch["name"], outputs, plain(batch["label"]), strict=True):
            trials = case_scores(prediction[0].cpu().numpy(), label[0].cpu().numpy(), classes, pl_module.ignore_label)
            self._cases[name] = {trial: trials[trial] for trial in TRIALS[1:]}

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: SegmentationModule) -> None:
        if trainer.state.fn == TrainerFn.VALIDATING:
            self.per_case = gather_from_ranks(self._cases)
        self._cases = {}
