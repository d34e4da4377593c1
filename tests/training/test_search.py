"""Search through Hydra's Optuna sweeper: a training returns its objective (the configuration names
it), the study keeps the trial of the higher one and lives in the sweep folder, the report reads
it back; a trial may train several folds and return their mean; a missing plugin is named with
the extra that installs it."""

from __future__ import annotations

import json

import pytest
import yaml

from helpers.data import write_decathlon
from helpers.training import TINY_2D, TINY_MODEL, TINY_TRAINER, compose_config, run_train_script
from scripts import search_report
from segnet.commands import check_plugins
from segnet.errors import ConfigError
from segnet.training.train_command import FOLDS_FILE, objective_of, train_command


@pytest.mark.slow
def test_a_two_trial_optuna_sweep_keeps_the_trial_with_the_higher_objective(tmp_path):
    sweep = tmp_path / "multirun"
    result = run_train_script(
        ["-m", "hydra/sweeper=optuna", "hydra/sweeper/sampler=grid", "hydra.sweeper.direction=maximize",
         "hydra.sweeper.n_trials=2", "hydra.sweeper.study_name=two",
         "hydra.sweeper.storage='${sqlite_file:${hydra.sweep.dir}/optuna.db}'",
         "optim.lr=choice(0.00001,0.01)", "trainer.max_epochs=2", "op=python",
         *TINY_2D, *TINY_MODEL, *TINY_TRAINER], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    trials = {}
    for metrics in sweep.glob("*/metrics.json"):
        config = yaml.safe_load((metrics.parent / "config.yaml").read_text())
        trials[config["optim"]["lr"]] = json.loads(metrics.read_text())["val_dice_mean"]
    assert set(trials) == {0.00001, 0.01} and trials[0.01] != trials[0.00001]
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert best["best_value"] == pytest.approx(max(trials.values()))
    assert best["best_params"]["optim.lr"] == max(trials, key=trials.get)
    assert search_report.main([str(sweep)]) == 0  # the study, read back from the sweep folder
    report = (sweep / "search.md").read_text()
    assert f"objective {max(trials.values()):.4f}" in report and (sweep / "search.png").is_file()


def test_a_search_goes_on_with_its_own_study_and_one_on_other_data_or_folds_starts_its_own(tmp_path, monkeypatch):
    """Optuna's sweeper loads the study its name and storage find: a fixed name would make the
    searches of two datasets one study, with one best trial."""
    monkeypatch.chdir(tmp_path)  # the sweep folder is relative; naming its storage makes it

    def study(*overrides: str) -> tuple[str, str, str]:
        hydra = compose_config(["experiment=search_loss", *overrides], with_hydra=True).hydra
        return hydra.sweeper.study_name, hydra.sweeper.storage, hydra.sweep.dir

    name = "Dataset001_Lung-fold_0-val_dice_mean"
    lung = study("data.root=/data/Dataset001_Lung")
    assert lung == (name, f"sqlite:///{tmp_path.resolve()}/multirun/search_loss/{name}/optuna.db",
                    f"multirun/search_loss/{name}")
    assert study("data.root=/scratch/Dataset001_Lung/") == lung  # the same search, its dataset moved
    others = [study("data.root=/data/Dataset002_Liver"), study("data.root=/data/Dataset001_Lung", "folds=[0,1,2]"),
              study("data.root=/data/Dataset001_Lung", "data.fold=1"),
              study("data.root=/data/Dataset001_Lung", "objective=best_val_dice_mean")]
    assert len({*others, lung}) == 5 and all(set(other).isdisjoint(lung) for other in others)


def test_the_search_report_given_the_searches_folder_names_their_studies(tmp_path, capsys):
    for name in ("Dataset001_Lung-fold_0-val_dice_mean", "Dataset002_Liver-folds_0_1-val_dice_mean"):
        (tmp_path / name).mkdir()
        (tmp_path / name / search_report.STORAGE).touch()
    with pytest.raises(SystemExit):
        search_report.main([str(tmp_path)])
    assert (f"{tmp_path} holds the searches Dataset001_Lung-fold_0-val_dice_mean, "
            "Dataset002_Liver-folds_0_1-val_dice_mean; pass one of their folders") in capsys.readouterr().err


def test_the_preset_search_is_modeled_by_tpe_after_its_random_start():
    """TPE draws its first n_startup_trials at random; with Optuna's default of 10 a 10-trial search
    would be a random one."""
    from helpers import ROOT

    sweeper = yaml.safe_load((ROOT / "conf" / "experiment" / "search_loss.yaml").read_text())["hydra"]["sweeper"]
    assert sweeper["sampler"]["n_startup_trials"] <= sweeper["n_trials"] // 2


def test_a_missing_search_plugin_is_named_with_its_extra(monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("hydra_plugins.hydra_optuna") else find_spec(name, *a))
    for asking in ("hydra/sweeper=optuna", "experiment=search_loss"):
        with pytest.raises(ConfigError, match=rf"{asking} needs a Hydra plugin .* pip install -e '\.\[search\]'"):
            check_plugins(["-m", asking, "seed=1"])
    check_plugins(["-m", "seed=1,2"])  # Hydra's own sweeper needs nothing


def test_the_objective_is_named_by_the_configuration():
    assert objective_of({"val_dice_mean": 0.5, "best_val_dice_mean": 0.6}, "best_val_dice_mean") == 0.6
    with pytest.raises(ConfigError, match=r"objective=dice is not a number of metrics.json; use one of "
                                          r"best_val_dice_mean, val_dice_mean"):
        objective_of({"val_dice_mean": 0.5, "best_val_dice_mean": 0.6, "scored": {}}, "dice")


@pytest.mark.slow
def test_a_trial_over_folds_trains_each_in_its_folder_and_returns_their_mean(tmp_path):
    root = write_decathlon(tmp_path / "Task", cases=3)
    run = tmp_path / "run"
    summary = train_command(compose_config(["data=folder", f"data.root={root}", "data.num_folds=3", "folds=[0,2]",
                                            "objective=best_val_dice_mean", "data.num_workers=0", "op=python",
                                            "data.steps_per_epoch=1", *TINY_MODEL, *TINY_TRAINER], output_dir=run))
    scores = {fold: json.loads((run / f"fold_{fold}" / "metrics.json").read_text())["best_val_dice_mean"]
              for fold in ("0", "2")}
    assert summary == {"best_val_dice_mean": pytest.approx(sum(scores.values()) / 2), "folds": scores}
    assert json.loads((run / FOLDS_FILE).read_text()) == summary
    splits = {fold: json.loads((run / f"fold_{fold}" / "splits.json").read_text()) for fold in ("0", "2")}
    assert splits["0"] != splits["2"]  # each run its own fold
