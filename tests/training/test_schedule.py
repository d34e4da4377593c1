"""The optimizers and schedules of conf/optim/. optim=adamw_cosine (the default): AdamW, a linear
warm-up to optim.lr over its first steps, a cosine decay to optim.min_lr_ratio of it, then that
floor (torch's SequentialLR; its state is in every checkpoint). optim=sgd_poly: nnU-Net's SGD
with Nesterov momentum 0.99 and lr 1e-2 x (1 - step / steps)^0.9."""

from __future__ import annotations

import math

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from helpers.training import compose_config, tiny_overrides
from segnet.training.train import build_module


def rates_over(cfg, steps: int) -> tuple[torch.optim.Optimizer, list[float]]:
    configured = build_module(cfg, "python").configure_optimizers()
    optimizer, schedule = configured["optimizer"], configured["lr_scheduler"]["scheduler"]
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    return optimizer, rates


def test_warm_up_then_cosine_then_the_floor():
    cfg = compose_config(tiny_overrides() + ["optim.schedule_steps=200", "optim.warmup_steps=20"])
    lr, floor = cfg.optim.lr, cfg.optim.min_lr_ratio
    optimizer, rates = rates_over(cfg, 230)
    assert isinstance(optimizer, torch.optim.AdamW)
    for step in range(20):  # warm-up: (step + 1) / 20 of the rate
        assert rates[step] == pytest.approx(lr * (step + 1) / 20, rel=1e-9)
    for step in (20, 60, 110, 199):  # cosine from the full rate down to the floor over the remaining 180
        cosine = floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * (step - 20) / 180))
        assert rates[step] == pytest.approx(lr * cosine, rel=1e-6)
    assert rates[200:] == pytest.approx([lr * floor] * 30, rel=1e-9)  # a longer (resumed) run stays there


def test_sgd_poly_is_nnunets_sgd_and_polynomial_decay():
    cfg = compose_config(tiny_overrides() + ["optim=sgd_poly", "optim.schedule_steps=100"])
    optimizer, rates = rates_over(cfg, 101)
    group = optimizer.param_groups[0]
    assert isinstance(optimizer, torch.optim.SGD)
    assert (group["momentum"], group["nesterov"], group["weight_decay"]) == (0.99, True, 3e-5)
    for step in (0, 1, 37, 99):
        assert rates[step] == pytest.approx(1e-2 * (1 - step / 100) ** 0.9, rel=1e-9)
    assert rates[100] == 0.0


def test_early_stopping_waits_for_a_rising_dice():
    stopping = instantiate(compose_config(tiny_overrides() + ["callbacks=early_stopping"]).callbacks.early_stopping)
    assert stopping.monitor == "val/dice_mean"
    assert stopping.monitor_op(torch.tensor(0.9), torch.tensor(0.8))  # a higher Dice is the improvement
    assert not stopping.monitor_op(torch.tensor(0.7), torch.tensor(0.8))


def test_a_resume_compares_the_loss_by_the_terms_it_computes():
    from segnet.training.resume import differences

    sections = {"model": {}, "data": {}, "optim": {"name": "adamw_cosine"}, "inference": {}}
    default = OmegaConf.to_container(compose_config(tiny_overrides()).loss)
    edge = {**default, "edge": {"weight": 1.0, "band_mm": 2.0}}
    assert differences({**sections, "loss": default}, {**sections, "loss": edge}) == [
        "loss.edge.band_mm: unset there, 2.0 now", "loss.edge.weight: unset there, 1.0 now",
        "loss.ramp_steps: unset there, 0 now"]
    unused = {**default, "cldice": {"weight": 0.0, "iterations": 5}}  # a term of weight 0 computes nothing
    assert differences({**sections, "loss": default}, {**sections, "loss": unused}) == []
