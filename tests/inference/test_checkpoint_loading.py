"""Checkpoints are loaded weights-only: one that carries pickled code is refused with a clear
message, and the code never runs (training's resume and evaluation alike)."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

from helpers.training import run_train_script, tiny_overrides
from segnet.checkpoints.reading import CheckpointError
from segnet.inference.loading import load_checkpoint


class RunsCodeWhenUnpickled:
    """Unpickling this calls os.mkdir(marker): the kind of payload a hostile checkpoint carries."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (self.marker,)


@pytest.fixture
def hostile_checkpoint(tmp_path):
    marker = tmp_path / "code-ran"
    path = tmp_path / "hostile.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {"model": RunsCodeWhenUnpickled(str(marker))}}, path)
    return path, marker


def test_loading_a_checkpoint_refuses_pickled_code(hostile_checkpoint):
    path, marker = hostile_checkpoint
    with pytest.raises(CheckpointError, match=r"hostile\.ckpt holds Python objects other than tensors.*weights-only"):
        load_checkpoint(path)
    assert not marker.exists()


@pytest.mark.slow
def test_resuming_training_from_it_is_refused_before_any_code_runs(hostile_checkpoint, tmp_path):
    path, marker = hostile_checkpoint
    result = run_train_script(tiny_overrides() + ["op=python", f"ckpt_path={path}"], cwd=tmp_path)
    assert result.returncode != 0
    assert "error: " in result.stderr and "weights-only" in result.stderr
    assert "Traceback" not in result.stderr
    assert not marker.exists()


def test_evaluation_predicts_under_the_autocast_the_model_trained_with(tmp_path):
    from helpers.training import compose_config
    from segnet.evaluation.evaluator import Evaluator
    from segnet.training.train import train

    train(compose_config(tiny_overrides() + ["op=cpp", "trainer.precision=bf16-mixed"], output_dir=tmp_path))
    model = load_checkpoint(tmp_path / "checkpoints" / "last.ckpt", backend="cpp")
    assert model.precision == "bf16-mixed"
    seen = []

    def spy(batch):
        seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        return model.net(batch)

    evaluator = Evaluator(dataclasses.replace(model, net=spy), tmp_path / "evaluation")
    probabilities = evaluator.predict(torch.randn(1, 32, 32), evaluator.predictor.configurations[0])
    assert probabilities.shape == (3, 32, 32)
    assert seen == [(True, torch.bfloat16)]

