"""segnet's installed commands run as a user runs them, for the scripts that train and compare
(scripts/peer_nnunet.py, scripts/accuracy_check.py): each in its own process and run folder, its
failure the calling script's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def folder_training(dataset: Path, dims: int, fold: int, seed: int) -> list[str]:
    """The overrides that train the shipped defaults on one fold of a dataset folder."""
    return ["data=folder", f"data.root={dataset}", f"data.spatial_dims={dims}", f"data.fold={fold}",
            f"seed={seed}", "data.num_workers=2"]


def installed_command(name: str) -> Path:
    """The console script pyproject.toml installs as `name`, beside this interpreter."""
    return Path(sys.executable).parent / name


def run_command(name: str, overrides: list[str], run: Path) -> None:
    """`name <overrides>` (segnet-train, segnet-evaluate, ...: installed beside this interpreter),
    its run folder `run`; a failure ends the calling script with the command's last words."""
    done = subprocess.run([str(installed_command(name)), *overrides, f"hydra.run.dir={run}"], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed in {run}:\n{done.stderr[-3000:]}")
