"""What each entry point installs: `make train` the core alone (what training and prediction
import), `make test` the extras its tests use, each behind its own stamp so that either runs right
after the other; the core leaves out what only an extra feature needs, and that feature names its
extra where it is missing."""

from __future__ import annotations

import importlib.util
import re
import subprocess

import pytest

from helpers import ROOT
from segnet.commands import check_plugins
from segnet.errors import ConfigError

tomllib = pytest.importorskip("tomllib")  # Python 3.11 on
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def dry_run(target: str) -> list[str]:
    """The commands `make TARGET` runs, its stamps made again (-B), nothing run (-n)."""
    ran = subprocess.run(["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         check=True)
    return ran.stdout.splitlines()


def install_and_stamp(target: str) -> tuple[list[str], list[str]]:
    lines = dry_run(target)
    return ([line.partition(" install ")[2] for line in lines if " pip install " in line],
            [line.removeprefix("touch ") for line in lines if line.startswith("touch ")])


def test_make_train_installs_the_core_alone_and_make_test_the_extras():
    train_installs, train_stamps = install_and_stamp("train")
    test_installs, test_stamps = install_and_stamp("test")
    assert train_installs == ["--no-compile -e ."]
    extras = re.fullmatch(r'--no-compile -e "\.\[([\w,]+)\]"', test_installs[0])
    assert len(test_installs) == 1 and extras, test_installs
    # every extra but tracking-ui: its MLflow server needs SQLAlchemy 2, the search extra's Optuna 2
    # SQLAlchemy 1, so the two never share an environment
    assert set(extras[1].split(",")) == set(PROJECT["optional-dependencies"]) - {"tracking-ui"}
    # one stamp each: make test after make train installs its extras, make train after make test is current
    assert len(train_stamps) == len(test_stamps) == 1 and train_stamps != test_stamps
    removed = " ".join(line for line in dry_run("clean") if line.startswith("rm "))
    assert train_stamps[0] in removed.split() and test_stamps[0] in removed.split()


def test_the_core_leaves_out_what_only_an_extra_feature_needs():
    core = " ".join(PROJECT["dependencies"])
    for extra in ("hydra-submitit-launcher", "nnunetv2", "mlflow", "wandb", "hydra-optuna-sweeper", "pytest",
                  "SimpleITK", "pydicom", "highdicom"):
        assert extra not in core


def test_a_missing_launcher_plugin_is_named_with_its_extra(monkeypatch):
    find_spec = importlib.util.find_spec
    missing = "hydra_plugins.hydra_submitit"
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith(missing) else find_spec(name, *a))
    for asking in ("hydra/launcher=slurm", "hydra/launcher=submitit_local"):
        with pytest.raises(ConfigError, match=rf"{asking} needs a Hydra plugin .* pip install -e '\.\[slurm\]'"):
            check_plugins(["-m", asking, "seed=1"])
