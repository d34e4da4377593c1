"""The optimizers and learning-rate schedules of conf/optim/, each torch's own, stepped once per
optimizer step. `total` is the schedule's length in steps (optim.schedule_steps, else the first
fit's); a resumed fit loads the scheduler's state over the one made here, so it continues the
first fit's schedule whatever its own length."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim import lr_scheduler

from segnet.errors import ConfigError

log = logging.getLogger(__name__)
Schedule = tuple[torch.optim.Optimizer, lr_scheduler.LRScheduler]


def adamw_cosine(parameters: Iterable[torch.nn.Parameter], optim: dict[str, Any], total: int) -> Schedule:
    """AdamW; a linear warm-up to lr over warmup_steps, at most a tenth of `total` (a short run
    spends most of its steps learning, not warming up), a cosine decay to lr x min_lr_ratio at
    `total`, then that floor (a longer resumed run stays there)."""
    optimizer = torch.optim.AdamW(parameters, lr=optim["lr"], weight_decay=optim["weight_decay"])
    warmup = min(optim["warmup_steps"], max(total // 10, 1))
    if warmup < optim["warmup_steps"]:
        log.info("optim.warmup_steps=%d shortened to %d: a tenth of the schedule's %d steps", optim["warmup_steps"],
                 warmup, total)
    floor = optim["min_lr_ratio"]
    schedule = lr_scheduler.SequentialLR(optimizer, [
        lr_scheduler.LinearLR(optimizer, start_factor=1 / warmup, total_iters=warmup - 1),  # (step + 1) / warmup
        lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, total - warmup), eta_min=optim["lr"] * floor),
        lr_scheduler.LambdaLR(optimizer, lambda _: floor),
    ], milestones=[warmup, total])
    return optimizer, schedule


def sgd_poly(parameters: Iterable[torch.nn.Parameter], optim: dict[str, Any], total: int) -> Schedule:
    """nnU-Net's: SGD with Nesterov momentum, lr x (1 - step / total)^exponent (0 from `total` on)."""
    optimizer = torch.optim.SGD(parameters, lr=optim["lr"], momentum=optim["momentum"], nesterov=True,
                                weight_decay=optim["weight_decay"])
    return optimizer, lr_scheduler.PolynomialLR(optimizer, total_iters=total, power=optim["exponent"])


OPTIMIZERS: dict[str, Callable[..., Schedule]] = {"adamw_cosine": adamw_cosine, "sgd_poly": sgd_poly}


def optimizer_and_schedule(parameters: Iterable[torch.nn.Parameter], optim: dict[str, Any], total: int) -> Schedule:
    name = optim["name"]
    if name not in OPTIMIZERS:
        raise ConfigError(f"optim.name={name}; use optim={' or optim='.join(OPTIMIZERS)}")
    return OPTIMIZERS[name](parameters, optim, total)
