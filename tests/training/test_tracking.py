"""Experiment tracking (segnet.training.tracking): Lightning's loggers chosen one or several at a
time, a run read back from MLflow through its own client, and a missing library named with the
extra that installs it."""

from __future__ import annotations

import csv
import importlib.util
import json
import logging
import shutil
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from helpers.stops import signal_at
from helpers.training import TINY_2D, TINY_MODEL, TINY_TRAINER, compose_config, tiny_overrides
from segnet.config import mlflow_artifacts
from segnet.errors import ConfigError
from segnet.training.checks import check_training_config
from segnet.training.tracking import flattened


def test_a_run_is_read_back_from_mlflow_through_its_own_client(tmp_path):
    from mlflow.tracking import MlflowClient

    from segnet.training.train import train

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run = tmp_path / "run"
    metrics = train(compose_config(["logger=[tensorboard,csv,mlflow]", f"logger.mlflow.tracking_uri={store}",
                                    f"logger.mlflow.artifact_location={tmp_path / 'artifacts'}", "optim.lr=0.002",
                                    *TINY_2D, *TINY_MODEL, *TINY_TRAINER], output_dir=run))
    assert (run / "tensorboard").is_dir() and (run / "csv" / "metrics.csv").is_file()  # every logger chosen
    client = MlflowClient(store)
    (experiment,) = [e for e in client.search_experiments() if e.name == "segnet"]
    (tracked,) = client.search_runs([experiment.experiment_id])
    assert tracked.info.status == "FINISHED" and tracked.data.tags["run_folder"] == str(run)
    assert tracked.info.run_name == run.name  # the run folder's, not one MLflow makes up
    assert tracked.data.params["config.optim.lr"] == "0.002"  # the resolved configuration
    assert tracked.data.params["config.data.image_size"] == "32"
    # each parameter once: the configuration's keys, not also the module's copy of its sections
    written = flattened(OmegaConf.to_container(OmegaConf.load(run / "config.yaml")), "config")
    kept = {key for key, value in written.items() if value != []}  # Lightning's flattening drops empty lists
    attempt = {"config.ckpt_path", "config.logger.mlflow.resumed_from", "config.logger.csv.resumed_from"}
    assert set(tracked.data.params) == kept - attempt
    final = client.get_metric_history(tracked.info.run_id, "val/dice_mean")[-1].value
    assert final == pytest.approx(metrics["val_dice_mean"], abs=1e-6)  # the final validation's
    files = {artifact.path for artifact in client.list_artifacts(tracked.info.run_id)}
    assert {"metrics.json", "config.yaml", "progress.png"} <= files
    saved = client.download_artifacts(tracked.info.run_id, "metrics.json", str(tmp_path))
    assert json.loads(open(saved).read())["val_dice_mean"] == metrics["val_dice_mean"]


@pytest.mark.parametrize("logger,library", [("mlflow", "mlflow"), ("wandb", "wandb")])
def test_a_missing_tracking_library_is_named_with_its_extra(monkeypatch, logger, library):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == library else find_spec(name, *a))
    with pytest.raises(ConfigError, match=rf"logger={logger} needs the {library} package, which is not installed: "
                                          r"pip install -e '\.\[tracking\]'"):
        check_training_config(compose_config([f"logger=[tensorboard,{logger}]"]))
    check_training_config(compose_config(["logger=csv"]))  # the others need nothing more


def csv_rows(run) -> list[dict[str, str]]:
    with open(run / "csv" / "metrics.csv", newline="") as file:
        return list(csv.DictReader(file))


def logged(rows: list[dict[str, str]]) -> list[tuple[int, list[str]]]:
    """Each row's step and the keys it has values of."""
    return [(int(row["step"]), sorted(key for key, value in row.items() if value and key != "step")) for row in rows]


def test_a_resumed_run_continues_its_csv_log(tmp_path):
    from segnet.training.train import train

    run = tmp_path / "run"
    overrides = [*tiny_overrides(), "op=python", "logger=csv", "trainer.max_epochs=3"]  # 2 steps an epoch
    with pytest.raises(SystemExit):
        train(compose_config([*overrides, *signal_at("SIGTERM", 3, "training")], output_dir=run))
    before_stop = csv_rows(run)
    assert {step for step, _ in logged(before_stop)} == set(range(3))
    stopped_at = tmp_path / "stopped_at_3.ckpt"
    shutil.copy(run / "checkpoints" / "last.ckpt", stopped_at)
    train(compose_config(overrides, output_dir=run))
    resumed = csv_rows(run)
    assert resumed[:len(before_stop)] == before_stop  # the steps before the stop, as they were logged
    assert [step for step, _ in logged(resumed[len(before_stop):])][0] == 3
    # As if the run had logged steps 3 to 6 and then died before saving a checkpoint past step 3:
    # resumed from there again, it logs those steps once.
    shutil.copy(stopped_at, run / "checkpoints" / "last.ckpt")
    train(compose_config(overrides, output_dir=run))
    again = csv_rows(run)
    assert again[:len(before_stop)] == before_stop and logged(again) == logged(resumed)


def tracked_runs(store: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store)
    return client.search_runs([client.get_experiment_by_name("segnet").experiment_id])


def test_mlflow_keeps_a_run_s_files_beside_its_store_whatever_the_working_folder(tmp_path, monkeypatch):
    from segnet.training.train import train

    store, elsewhere = tmp_path / "store" / "mlflow.db", tmp_path / "elsewhere"
    store.parent.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the folder the run starts in, as it would be for any one run
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store}")
    train(compose_config([*tiny_overrides(), "op=python", "logger=mlflow"], output_dir=tmp_path / "run"))
    (tracked,) = tracked_runs(f"sqlite:///{store}")
    assert tracked.info.artifact_uri == f"{(store.parent / 'mlruns').as_uri()}/{tracked.info.run_id}/artifacts"
    assert (store.parent / "mlruns" / tracked.info.run_id / "artifacts" / "metrics.json").is_file()
    assert not any(elsewhere.iterdir())
    assert mlflow_artifacts("sqlite:///mlflow.db") == (Path.cwd() / "mlruns").as_uri()  # a store in the working folder
    assert mlflow_artifacts("http://tracking:5000") is None  # a server keeps them where it is set to


def test_a_resumed_run_goes_on_in_its_own_mlflow_run(tmp_path, caplog):
    from mlflow.tracking import MlflowClient

    from segnet.training.train import train

    store, run = f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "run"
    overrides = [*tiny_overrides(), "op=python", "logger=mlflow", f"logger.mlflow.tracking_uri={store}"]
    stopped = signal_at("SIGTERM", 1, "training")  # 2 steps an epoch
    with pytest.raises(SystemExit):
        train(compose_config([*overrides, "trainer.max_epochs=2", *stopped], output_dir=run))
    with caplog.at_level(logging.WARNING):
        train(compose_config([*overrides, "trainer.max_epochs=2"], output_dir=run))
    assert "keeps the first value" not in caplog.text  # the same command: nothing changed (its ckpt_path is its own)
    # trained on once it had finished: a configuration that differs from the one MLflow has
    train(compose_config([*overrides, "trainer.max_epochs=3"], output_dir=run))
    (tracked,) = tracked_runs(store)
    steps = [metric.step for metric in MlflowClient(store).get_metric_history(tracked.info.run_id, "train/loss")]
    assert tracked.info.status == "FINISHED" and sorted(steps) == list(range(6))
    assert tracked.data.params["config.trainer.max_epochs"] == "2"  # MLflow keeps a parameter's first value


def test_w_and_b_keeps_the_configuration_each_key_once(tmp_path):
    pytest.importorskip("wandb")
    logger = instantiate(compose_config(["logger=wandb"], output_dir=tmp_path).logger.wandb)
    assert logger.experiment.name == tmp_path.name  # the run folder's
    logger.log_hyperparams({"data": {"batch_size": 2}, "backend": "cpp"})  # Lightning's call, the module's sections
    logger.log_configuration({"config.data.batch_size": 2})
    assert dict(logger.experiment.config) == {"config.data.batch_size": 2}
    logger.experiment.finish()
