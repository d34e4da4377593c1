"""Every command refuses a key its configuration lacks, with or without `+`, in one line naming the
nearest keys (or the group option that has the key), before Hydra makes a run folder; the keys
that are meant to be added with `+`, Hydra's own keys and sweeps still pass."""

from __future__ import annotations

import subprocess
import sys
from functools import cache

import pytest

from helpers import ROOT
from helpers.stops import signal_at, step_file
from helpers.training import FIT_PROBE, batch_log, compose_config
from segnet.command_help import main_keys
from segnet.commands import COMMANDS, Command
from segnet.config_keys import check_keys
from segnet.errors import ConfigError


def answer(command: Command, arguments: list[str], folder, monkeypatch) -> str:
    """The one line `command ARGUMENTS` ends with, run in this process in `folder`; it must have
    stopped before Hydra made any folder there."""
    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "argv", [command.name, *arguments])
    with pytest.raises(SystemExit) as exited:
        command()
    assert not list(folder.iterdir()), "a run folder was made"
    message = str(exited.value.code)
    assert message.startswith("error: ") and "\n" not in message
    return message


@cache
def misspelt_main_key(command: Command) -> tuple[str, str]:
    """The first of the command's main keys (its --help's), and a misspelling of it (one letter more)."""
    cfg = compose_config([], name=command.config_name, with_hydra=True)
    key = next(iter(main_keys(cfg, [command.description, *command.examples])))
    return key, key + "s"


@pytest.mark.parametrize("plus", ["", "+", "++"])
@pytest.mark.parametrize("config_name", sorted(COMMANDS))
def test_every_command_refuses_an_unknown_key_with_the_nearest_one(config_name, plus, tmp_path, monkeypatch):
    command = COMMANDS[config_name]
    key, misspelt = misspelt_main_key(command)
    message = answer(command, [f"{plus}{misspelt}=1"], tmp_path, monkeypatch)
    assert f"has no key {misspelt}" in message and f"did you mean {key}" in message, message
    assert ("`+` adds a key that nothing in segnet reads" in message) == bool(plus)


def test_train_py_answers_in_one_line_without_a_traceback_or_a_run_folder(tmp_path):
    ran = subprocess.run([sys.executable, str(ROOT / "train.py"), "+seeed=3"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert ran.returncode == 1 and "Traceback" not in ran.stderr
    assert ran.stderr.strip().splitlines() == [ran.stderr.strip()] and "did you mean seed?" in ran.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("given,nearest", [
    ("+optim.learning_rate=1e-3", "did you mean optim.lr "),  # another tool's name for it
    ("+model.chanels=[8,16]", "did you mean model.channels "),
    ("batchsize=4", "did you mean data.batch_size "),  # a leaf of another section
    ("dat=folder", "did you mean data=?"),  # a group
    ("++trainer.max_epoch=3", "did you mean trainer.max_epochs "),  # a typo, not another Lightning argument
    ("+trainer.gpus=1", "did you mean trainer.devices "),
])
def test_the_nearest_key(given, nearest):
    with pytest.raises(ConfigError, match="did you mean") as refused:
        check_keys("segnet-train", "train", [given])
    assert nearest in str(refused.value)


@pytest.mark.parametrize("given,group", [("data.root=/data/Task", "data=folder"), ("logger.csv.name=x", "logger=csv"),
                                         ("data.hard.tubes=2", "data=synthetic2d_hard")])
def test_a_key_of_a_group_option_not_chosen_names_the_option(given, group):
    with pytest.raises(ConfigError, match=f"which this run does not use: add {group}$"):
        check_keys("segnet-train", "train", [given])
    check_keys("segnet-train", "train", [group, given])


@pytest.mark.parametrize("given,answer_", [
    ("data=foldr", "data has no option foldr; did you mean data=folder?"),
    ("+seed=3", "seed is a key already; set it without +: seed=3"),
    ("trainer.min_epochs=2", "to pass it to lightning.pytorch.Trainer, add it: +trainer.min_epochs=2"),
    ("+callbacks.mine.every=2", "give its class too: +callbacks.mine._target_=CLASS"),
])
def test_the_fix_is_named(given, answer_):
    with pytest.raises(ConfigError) as refused:
        check_keys("segnet-train", "train", [given])
    assert answer_ in str(refused.value)


@pytest.mark.parametrize("arguments", [
    [FIT_PROBE], batch_log(ROOT / "x"), signal_at("SIGTERM", 1, "training"), step_file(ROOT / "x"),  # tests' own
    ["+callbacks.postprocessing_trials._target_=segnet.training.postprocessing_trials.PostprocessingTrials"],
    ["+trainer.min_epochs=2", "++trainer.max_time=00:01:00:00"],  # Lightning Trainer arguments conf/ leaves out
    ["-m", "seed=0,1", "optim.lr=interval(0.001,0.01)", "data=folder,synthetic3d", "data.root=/x",
     "data.fold=range(3)"],
    ["-m", "loss=glob(*)", "loss.edge.band_mm=3"],
    ["logger=[tensorboard,csv]", "logger.csv.name=x"],
    ["hydra.run.dir=runs/a", "hydra/launcher=slurm", "hydra.launcher.partition=gpu", "--cfg", "job"],
    ["experiment=ablation_loss", "data.root=/x", "data.steps_per_epoch=10"],
])
def test_what_is_meant_to_be_given_passes(arguments):
    check_keys("segnet-train", "train", [str(a) for a in arguments])


@pytest.mark.parametrize("config_name,arguments", [
    ("predict", ["exported=model.pt2", "++output=out", "input=in"]),  # model= as segnet-predict rewrites it
    ("plan", ["verify=true", "data.root=/x", "output=plans.json"]),
])
def test_what_other_commands_are_given_passes(config_name, arguments):
    check_keys(COMMANDS[config_name].name, config_name, arguments)
