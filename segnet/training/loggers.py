"""Lightning's loggers as a resumed run needs them (conf/logger/ names them): a run resumed from a
checkpoint (`resumed_from`, the run's ckpt_path once decided) continues the record its loggers
kept before the stop, instead of emptying it or starting another. TensorBoard needs nothing: a
resume adds an event file beside the earlier ones, and TensorBoard reads them together."""

from __future__ import annotations

import csv
from typing import Any

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from segnet.training.resume import saved_state


class ContinuedMetricsWriter(ExperimentWriter):
    """Lightning's writer of metrics.csv, which deletes the file it finds. Told the step a resume
    starts from, this one keeps the rows logged before that step and writes on below them; the
    rows from that step on came after the checkpoint, and the resumed run logs those steps again."""

    def __init__(self, log_dir: str, resumed_step: int | None):
        self.resumed_step = resumed_step  # set first: Lightning's __init__ looks at the folder
        super().__init__(log_dir)

    def _check_log_dir_exists(self) -> None:
        if self.resumed_step is None or not self._fs.isfile(self.metrics_file_path):
            super()._check_log_dir_exists()
            return
        with self._fs.open(self.metrics_file_path, "r", newline="") as file:
            reader = csv.DictReader(file)
            kept = [row for row in reader if int(row["step"]) < self.resumed_step]
            # the file's columns: a key only the resumed run logs widens them, as Lightning does
            self.metrics_keys = list(reader.fieldnames or ())
        with self._fs.open(self.metrics_file_path, "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=self.metrics_keys)
            writer.writeheader()
            writer.writerows(kept)


class ResumableCSVLogger(CSVLogger):
    """Lightning's CSVLogger, whose metrics.csv a run resumed from `resumed_from` continues."""

    def __init__(self, *args: Any, resumed_from: str | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.resumed_from = resumed_from

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            # Lightning logs a step's values under the number of optimizer steps before it, which
            # is what a checkpoint saves as its global_step.
            step = saved_state(self.resumed_from)["global_step"] if self.resumed_from else None
            self._experiment = ContinuedMetricsWriter(self.log_dir, step)
        return self._experiment
