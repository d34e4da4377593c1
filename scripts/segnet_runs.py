"""segnet's commands run as a user runs them, for the scripts that train and compare (peer_nnunet.py,
accuracy_check.py): each in its own process and run folder, its failure the script's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def folder_training(dataset: Path, dims: int, fold: int, seed: int) -> list[str]:
    """The overrides that train the shipped defaults on one fold of a dataset folder."""
    return ["data=folder", f"data.root={dataset}", f"data.spatial_dims={dims}", f"data.fold={fold}",
            f"seed={seed}", "data.num_workers=2"]


def segnet_command(program: list[str], overrides: list[str], run: Path) -> None:
    """`python <program> <overrides>` from the repository, its run folder `run`; a failure ends the
    script with the command's last words."""
    done = subprocess.run([sys.executable, *program, *overrides, f"hydra.run.dir={run}"], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(program)} failed in {run}:\n{done.stderr[-3000:]}")
