"""Lightning's loggers as a resumed run needs them (conf/logger/ names them): a run resumed from a
checkpoint (`resumed_from`, the run's ckpt_path once decided) continues the record its loggers
kept before the stop, instead of emptying it or starting another. TensorBoard needs nothing: a
resume adds an event file beside the earlier ones, and TensorBoard reads them together.

The experiment trackers (MLflow, W&B) keep each parameter once: the run's resolved configuration
(`config.<key>`, segnet.training.tracking), not also the module's hyperparameters, which Lightning
logs at the start of a fit and which are sections of that configuration under other names."""

from __future__ import annotations

import csv
import logging
from argparse import Namespace
from typing import Any

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.fabric.utilities.logger import _convert_params, _flatten_dict
from lightning.pytorch.loggers import CSVLogger, MLFlowLogger, WandbLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from segnet.checkpoints.reading import saved_step
from segnet.cluster import is_first_process

log = logging.getLogger(__name__)
RUN_FOLDER_TAG = "run_folder"  # the MLflow tag that names a run's folder (conf/logger/mlflow.yaml)


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
            step = saved_step(self.resumed_from) if self.resumed_from else None
            self._experiment = ContinuedMetricsWriter(self.log_dir, step)
        return self._experiment


def folder_run(tracking_uri: str | None, experiment_name: str, run_folder: str | None) -> str | None:
    """The id of the experiment's newest MLflow run tagged with `run_folder`: the one whose
    checkpoints the folder holds (a fresh start there, ckpt_path=null, is a newer run)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None or run_folder is None:
        return None
    quote = "'" if "'" not in run_folder else '"'
    found = client.search_runs([experiment.experiment_id], f"tags.{RUN_FOLDER_TAG} = {quote}{run_folder}{quote}",
                               order_by=["attributes.start_time DESC"], max_results=1)
    return found[0].info.run_id if found else None


class ConfigurationParams:
    """A tracker whose parameters are the run's resolved configuration, logged with
    log_configuration (segnet.training.tracking), each once."""

    def log_hyperparams(self, params: dict[str, Any] | Namespace) -> None:
        """Lightning's call with the module's hyperparameters, at the start of a fit: sections of the configuration."""


class ResumableMLFlowLogger(ConfigurationParams, MLFlowLogger):
    """Lightning's MLFlowLogger. A run resumed from `resumed_from` goes on logging into the MLflow
    run tagged with its run folder, as Lightning does given that run's run_id, instead of starting
    a second one; a run_id given names the run itself."""

    def __init__(self, *, resumed_from: str | None = None, run_id: str | None = None, **settings: Any):
        if resumed_from is not None and run_id is None and is_first_process():  # the only process that logs
            run_id = folder_run(settings.get("tracking_uri"), settings.get("experiment_name", "lightning_logs"),
                                (settings.get("tags") or {}).get(RUN_FOLDER_TAG))
        super().__init__(run_id=run_id, **settings)

    @rank_zero_only
    def log_configuration(self, params: dict[str, Any] | Namespace) -> None:
        """The parameters the run has not logged yet. MLflow refuses to change a logged one, which
        a continued run may (a resume's data.num_workers): that keeps its first value."""
        given = _flatten_dict(_convert_params(params))
        logged = self.experiment.get_run(self.run_id).data.params
        changed = sorted(key for key, value in given.items() if key in logged and logged[key] != str(value)[:250])
        if changed:
            log.warning("MLflow run %s keeps the first value of %s, which this attempt changed", self.run_id,
                        ", ".join(changed))
        MLFlowLogger.log_hyperparams(self, {key: value for key, value in given.items() if key not in logged})


class ConfiguredWandbLogger(ConfigurationParams, WandbLogger):
    """Lightning's WandbLogger, whose run's config is the run's resolved configuration alone."""

    def log_configuration(self, params: dict[str, Any]) -> None:
        WandbLogger.log_hyperparams(self, params)  # rank zero only, as Lightning's is
