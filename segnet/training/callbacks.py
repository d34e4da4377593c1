"""Training-step and validation timing for TensorBoard and metrics.json."""

from __future__ import annotations

import statistics
import time

import lightning as L
import torch


class StepTimer(L.Callback):
    """Wall time of each optimizer step (forward, backward, update), synchronized on GPU; of each
    training step end to end (from the previous step's end: the wait for the loader, the transfer
    and device augmentation included, the fit's validations not); and of the validations during
    fit (what share of the fit they take).

    The first `skip` steps (compilation, allocator and loader warm-up) are left out of the summary.
    """

    def __init__(self, skip: int = 5):
        self.skip = skip
        self.step_ms: list[float] = []
        self.samples: list[int] = []
        self.wall_ms: list[float | None] = []  # None: the interval held a validation, so is no step's
        self.validation_seconds = 0.0
        self._start = 0.0
        self._last_end: float | None = None
        self._validation_start = 0.0

    def _sync(self, pl_module: L.LightningModule) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._sync(pl_module)
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._sync(pl_module)
        end = time.perf_counter()
        elapsed_ms = (end - self._start) * 1e3
        self.step_ms.append(elapsed_ms)
        self.wall_ms.append((end - self._last_end) * 1e3 if self._last_end is not None else None)
        self._last_end = end
        self.samples.append(int(batch["image"].shape[0]))
        pl_module.log("train/step_time_ms", elapsed_ms, on_step=True, on_epoch=False, batch_size=self.samples[-1])

    def on_validation_start(self, trainer, pl_module) -> None:
        self._validation_start = time.perf_counter()

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.state.fn == "fit" and not trainer.sanity_checking:
            self.validation_seconds += time.perf_counter() - self._validation_start
        self._last_end = None

    def summary(self) -> dict[str, float]:
        steps = self.step_ms[self.skip :] or self.step_ms
        samples = self.samples[self.skip :] or self.samples
        walls = [ms for ms in self.wall_ms[self.skip :] if ms is not None]
        return {
            "step_time_ms_median": statistics.median(steps) if steps else float("nan"),
            # the mean, not the median: a loader that keeps up most of the time and stalls now and
            # then costs its stalls, and a budget in seconds must count them
            "step_wall_ms_mean": statistics.fmean(walls) if walls else float("nan"),
            "samples_per_s": sum(samples) / (sum(steps) / 1e3) if steps else float("nan"),
            "validation_seconds": self.validation_seconds,
        }
