"""The installed commands start fast: `--help` and a configuration Hydra refuses answer without
importing torch, Lightning, MONAI or matplotlib (segnet.commands imports a command's work only
once its configuration composed), a command's check answers the common mistakes before its work
imports Lightning or MONAI, and `segnet-plan --verify` does not import Lightning."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import distribution

import pytest

from helpers import ROOT
from helpers.data import write_decathlon

COMMANDS = {e.name: e.value for e in distribution("segnet").entry_points if e.group == "console_scripts"}
HEAVY = ("torch", "lightning", "monai", "matplotlib")

# Runs a command's main with ARGS and, on the way out (Hydra ends --help with SystemExit), prints
# which of HEAVY it had imported.
PROBE = """
import atexit, importlib, sys
heavy = {heavy!r}
atexit.register(lambda: print("imported:", sorted(m for m in heavy if m in sys.modules)))
module, _, name = {entry!r}.partition(":")
sys.argv = [{command!r}, *{args!r}]
getattr(importlib.import_module(module), name)()
"""


def imported_heavy(command: str, *args: str, cwd=ROOT) -> tuple[subprocess.CompletedProcess, str]:
    code = PROBE.format(heavy=HEAVY, entry=COMMANDS[command], command=command, args=list(args))
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=300)
    return ran, ran.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_imports_none_of_the_heavy_packages(command):
    ran, imported = imported_heavy(command, "--help")
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "Main keys" in ran.stdout  # segnet.command_help's
    assert imported == "imported: []"


def test_a_refused_override_imports_none_of_them():
    ran, imported = imported_heavy("segnet-predict", "no_such_key=1")
    assert ran.returncode != 0 and "no_such_key" in ran.stderr
    assert imported == "imported: []"


def test_the_work_runs_once_the_configuration_composed():
    ran, imported = imported_heavy("segnet-plan", "--verify")  # data.root missing: the work's own error
    assert ran.returncode != 0 and "data.root is required" in ran.stderr
    assert "torch" in imported


def test_verify_reads_the_data_without_lightning_and_writes_nothing(tmp_path):
    root = write_decathlon(tmp_path / "Task", cases=2)
    ran, imported = imported_heavy("segnet-plan", "--verify", f"data.root={root}", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert [p.name for p in tmp_path.iterdir()] == ["Task"]  # no outputs/plan/<date_time>/, no .hydra/, no log
    # MONAI reads the images (on torch, and it loads matplotlib itself where it is installed)
    assert "'monai'" in imported and "'lightning'" not in imported


MISTAKES = {  # a command, its arguments (DATASET: a dataset of three cases) and how its one-line answer starts
    "folds": ("segnet-train", ["data=folder", "data.root=DATASET", "trainer=cpu"],
              "error: 3 training case(s) cannot make data.num_folds=5 folds; use 2 to 3 folds, or data.fold=all"),
    "root": ("segnet-train", ["data=folder", "trainer=cpu"], "error: data.root is required for data=folder"),
    "gpu": ("segnet-train", ["op=cuda"], "error: op.backend=cuda needs a GPU trainer"),
    "checkpoint": ("segnet-evaluate", ["ckpt_path=nope.ckpt", "data.root=DATASET"],
                   "error: ckpt_path=nope.ckpt is not a file; point it at a training run's checkpoints/final.ckpt"),
    "model": ("segnet-predict", ["input=x", "output=y"],
              "error: give ckpt_path=CKPT (a training checkpoint) or model=PATH.pt2 or MODEL.zip (an exported "
              "program or a model package), one of them: segnet-predict ckpt_path=CKPT input=IMAGES output=FOLDER"),
}


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_a_common_mistake_is_one_line_before_lightning_or_monai_load(tmp_path, mistake):
    command, args, answer = MISTAKES[mistake]
    root = write_decathlon(tmp_path / "Task", cases=3)
    args = [a.replace("DATASET", str(root)) for a in args]
    ran, imported = imported_heavy(command, *args, cwd=tmp_path)
    assert ran.returncode == 1 and "Traceback" not in ran.stderr, ran.stderr[-2000:]
    assert ran.stderr.strip().splitlines()[-1].startswith(answer)
    # Hydra's run folder (outputs/<task>/<date_time>/, or output=y itself) held nothing but its own
    # files: gone, with the outputs/ it made
    assert [p.name for p in tmp_path.iterdir()] == ["Task"]
    assert "'lightning'" not in imported and "'monai'" not in imported
