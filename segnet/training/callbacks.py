"""Training-step and validation timing for TensorBoard and metrics.json."""

from __future__ import annotations

import statistics
import time

import lightning as L
import torch


class StepTimer(L.Callback):
    """Wall time of each optimizer step (forward, backward, update), synchronized on GPU, and of
    the validations during fit (what share of the fit they take).

    The first `skip` steps (compilation, allocator warm-up) are left out of the summary.
    """

    def __init__(self, skip: int = 5):
        self.skip = skip
        self.step_ms: list[float] = []
        self.samples: list[int] = []
        self.validation_seconds = 0.0
        self._start = 0.0
        self._validation_start = 0.0

    def _sync(self, pl_module: L.LightningModule) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._sync(pl_module)
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._sync(pl_module)
        elapsed_ms = (time.perf_counter() - self._start) * 1e3
        self.step_ms.append(elapsed_ms)
        self.samples.append(int(batch["image"].shape[0]))
        pl_module.log("train/step_time_ms", elapsed_ms, on_step=True, on_epoch=False, batch_size=self.samples[-1])

    def on_validation_start(self, trainer, pl_module) -> None:
        self._validation_start = time.perf_counter()

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.state.fn == "fit" and not trainer.sanity_checking:
            self.validation_seconds += time.perf_counter() - self._validation_start

    def summary(self) -> dict[str, float]:
        steps = self.step_ms[self.skip :] or self.step_ms
        samples = self.samples[self.skip :] or self.samples
        return {
            "step_time_ms_median": statistics.median(steps) if steps else float("nan"),
            "samples_per_s": sum(samples) / (sum(steps) / 1e3) if steps else float("nan"),
            "validation_seconds": self.validation_seconds,
        }
