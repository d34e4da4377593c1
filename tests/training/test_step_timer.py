"""StepTimer's per-step times: the step alone, and end to end with the wait for data, which a
budget in seconds (scripts/peer_nnunet.py) must count."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from segnet.training import callbacks
from segnet.training.callbacks import StepTimer


def test_the_wall_time_of_a_step_counts_the_wait_for_data_but_not_a_validation(monkeypatch):
    clock = iter([])
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: next(clock))
    module = SimpleNamespace(device=torch.device("cpu"), log=lambda *args, **kwargs: None)
    fit = SimpleNamespace(state=SimpleNamespace(fn="fit"), sanity_checking=False)
    batch = {"image": torch.zeros(2, 1, 4, 4)}
    timer = StepTimer(skip=1)

    def step(start: float, end: float) -> None:
        nonlocal clock
        clock = iter([start, end])
        timer.on_train_batch_start(fit, module, batch, 0)
        timer.on_train_batch_end(fit, module, None, batch, 0)

    step(0.0, 1.0)        # skipped: the first
    step(3.0, 4.0)        # 2 s waiting for data, 1 s stepping: 3 s end to end
    step(4.5, 5.5)
    clock = iter([5.5, 15.5])  # a 10 s validation between steps ...
    timer.on_validation_start(fit, module)
    timer.on_validation_end(fit, module)
    step(16.0, 17.0)      # ... is not the next step's: no interval
    step(17.0, 18.0)
    summary = timer.summary()
    assert summary["step_time_ms_median"] == pytest.approx(1000.0)
    assert summary["step_wall_ms_mean"] == pytest.approx((3000.0 + 1500.0 + 1000.0) / 3)
    assert summary["validation_seconds"] == pytest.approx(10.0)
