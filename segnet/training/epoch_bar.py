"""The training's progress bar: Lightning's TQDMProgressBar, with the epoch's number and its
total of steps from the first line it draws, and redrawn at least every few seconds.

Lightning draws its training bar first as "Training: 0/?" and sets the epoch's total only when
the epoch starts; that first line stays in a log file. The total is known before: the training
loader's length (its sampler's draws per epoch over the batch size, segnet.data.sampling),
which Lightning has read by the time the fit starts. And Lightning redraws every
`refresh_rate` batches only: on a CPU, 5 steps are 10 seconds of an unchanging line."""

from __future__ import annotations

import sys
import time

from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm, convert_inf


class EpochBar(TQDMProgressBar):
    def __init__(self, refresh_rate: int = 1, seconds: float = 2.0):
        super().__init__(refresh_rate=refresh_rate)
        self.seconds = seconds  # the longest wait for a redraw while batches end
        self._drawn = time.monotonic()

    def init_train_tqdm(self) -> Tqdm:
        # Lightning's own bar's settings, with the epoch and its total instead of "Training" and "?"
        return Tqdm(desc=f"Epoch {self.trainer.current_epoch}", total=convert_inf(self.total_train_batches),
                    position=2 * self.process_position, disable=self.is_disabled, leave=True, dynamic_ncols=True,
                    file=sys.stdout, smoothing=0, bar_format=self.BAR_FORMAT)

    def _should_update(self, current: int, total: int) -> bool:
        now = time.monotonic()
        due = super()._should_update(current, total) or (self.is_enabled and now - self._drawn >= self.seconds)
        if due:
            self._drawn = now
        return due
