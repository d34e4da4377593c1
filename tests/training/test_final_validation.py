"""What the final validation scores beyond Dice: clDice and the Betti errors of the thin classes
(data.topology_classes) and, where a run adds the PostprocessingTrials callback (as
experiment=ablation_recipe does), each case's Dice after each candidate postprocessing rule, which
the ablation pairs as postprocessing on and off; the validations within fit score Dice alone."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.trainer.states import TrainerFn

from helpers.training import compose_config, tiny_overrides
from segnet.training.postprocessing_trials import PostprocessingTrials
from segnet.training.train import build_module


def validated(fn: TrainerFn, monkeypatch, *overrides: str, trials: PostprocessingTrials | None = None) -> dict:
    """A class-1 square and a class-2 square, predicted with a stray class-1 island far from both."""
    module = build_module(compose_config([*tiny_overrides(2), *overrides]), "python")
    label = torch.zeros(1, 1, 16, 16, dtype=torch.long)
    label[0, 0, 2:8, 2:8], label[0, 0, 10:14, 10:14] = 1, 2
    prediction = label.clone()
    prediction[0, 0, 12:14, 1:3] = 1
    one_hot = F.one_hot(prediction[:, 0], 3).permute(0, 3, 1, 2).float()
    monkeypatch.setattr(module, "predict_logits", lambda image: one_hot)
    monkeypatch.setattr(module, "log", lambda *args, **kwargs: None)
    trainer = SimpleNamespace(state=SimpleNamespace(fn=fn), logger=None, sanity_checking=False)
    module._trainer = trainer
    batch = {"image": torch.zeros(1, 1, 16, 16), "label": label, "name": ["case_a"]}
    outputs = module.validation_step(batch, 1)
    module.on_validation_epoch_end()
    if trials is not None:
        trials.on_validation_batch_end(trainer, module, outputs, batch, 1)
        trials.on_validation_epoch_end(trainer, module)
    return module.val_scores_per_case["case_a"]


def test_each_rule_is_scored_on_the_same_prediction(monkeypatch):
    trials = PostprocessingTrials()
    scores = validated(TrainerFn.VALIDATING, monkeypatch, trials=trials)
    assert scores["Dice"] == pytest.approx([2 * 36 / (40 + 36), 1.0])  # the island costs class 1
    after = trials.per_case["case_a"]
    assert set(after) == {"foreground", "classes", "foreground and classes"}
    assert after["classes"] == pytest.approx([1.0, 1.0])  # each class's largest part
    assert after["foreground"] == pytest.approx([1.0, 0.0])  # the foreground's: class 1's
    assert after["foreground and classes"] == pytest.approx([1.0, 0.0])
    validated(TrainerFn.FITTING, monkeypatch, trials=(within_fit := PostprocessingTrials()))
    assert within_fit.per_case == {}  # the validations within fit: Dice alone


def test_the_thin_classes_get_topology_scores(monkeypatch):
    scores = validated(TrainerFn.VALIDATING, monkeypatch, "data.topology_classes=[class1]")
    assert scores["Betti0 error"][0] == 1.0 and scores["Betti1 error"][0] == 0.0  # the island: one more part
    assert 0 < scores["clDice"][0] < 1
    assert all(math.isnan(scores[metric][1]) for metric in ("clDice", "Betti0 error", "Betti1 error"))
    assert "clDice" not in validated(TrainerFn.VALIDATING, monkeypatch)  # none by default


def test_validations_within_fit_score_dice_alone(monkeypatch):
    assert set(validated(TrainerFn.FITTING, monkeypatch, "data.topology_classes=all")) == {"Dice"}


@pytest.mark.parametrize(("mode", "final", "replaces"), [("max", 0.7, True), ("max", 0.3, False),
                                                          ("min", 0.3, True), ("min", 0.7, False)])
def test_the_final_validation_competes_for_best_in_the_monitor_s_direction(tmp_path, mode, final, replaces):
    from lightning.pytorch.callbacks import ModelCheckpoint

    from segnet.training.final_weights import compete_for_best

    checkpoint = ModelCheckpoint(dirpath=tmp_path, filename="best", monitor="val/loss", mode=mode)
    checkpoint.best_model_score, checkpoint.best_model_path = torch.tensor(0.5), str(tmp_path / "early.ckpt")
    saved = []
    trainer = SimpleNamespace(save_checkpoint=lambda path, weights_only: saved.append(path), is_global_zero=False,
                              strategy=SimpleNamespace(barrier=lambda name: None))
    compete_for_best(trainer, checkpoint, final, tmp_path / "last.ckpt")
    assert float(checkpoint.best_model_score) == pytest.approx(final if replaces else 0.5)
    assert saved == ([str(tmp_path / "best.ckpt")] if replaces else [])
