"""The learning-rate schedule: a linear warm-up to optim.lr over its first steps, a cosine decay
to optim.min_lr_ratio of it, then that floor (torch's SequentialLR; its state is in every
checkpoint)."""

from __future__ import annotations

import math

import pytest
import torch
from hydra.utils import instantiate

from helpers.training import compose_config, tiny_overrides
from segnet.training.api import build_module


def test_warm_up_then_cosine_then_the_floor():
    cfg = compose_config(tiny_overrides() + ["optim.schedule_steps=200", "optim.warmup_steps=20"])
    lr, floor = cfg.optim.lr, cfg.optim.min_lr_ratio
    configured = build_module(cfg, "python").configure_optimizers()
    optimizer, schedule = configured["optimizer"], configured["lr_scheduler"]["scheduler"]
    rates = []
    for _ in range(230):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    for step in range(20):  # warm-up: (step + 1) / 20 of the rate
        assert rates[step] == pytest.approx(lr * (step + 1) / 20, rel=1e-9)
    for step in (20, 60, 110, 199):  # cosine from the full rate down to the floor over the remaining 180
        cosine = floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * (step - 20) / 180))
        assert rates[step] == pytest.approx(lr * cosine, rel=1e-6)
    assert rates[200:] == pytest.approx([lr * floor] * 30, rel=1e-9)  # a longer (resumed) run stays there


def test_early_stopping_waits_for_a_rising_dice():
    stopping = instantiate(compose_config(tiny_overrides() + ["callbacks=early_stopping"]).callbacks.early_stopping)
    assert stopping.monitor == "val/dice_mean"
    assert stopping.monitor_op(torch.tensor(0.9), torch.tensor(0.8))  # a higher Dice is the improvement
    assert not stopping.monitor_op(torch.tensor(0.7), torch.tensor(0.8))
