"""Composing the real conf/ tree and running tiny trainings in tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import torch
from hydra import compose, initialize_config_dir
from lightning.pytorch.trainer.states import TrainerFn
from omegaconf import DictConfig

from helpers import ROOT
from helpers.data import OBLIQUE_AFFINE, write_decathlon
from segnet.config import register_resolvers

CONF = ROOT / "conf"

# A few seconds per run on 2 CPU cores: tiny images, a 2-level U-Net, one epoch.
TINY_2D = [
    "data.image_size=32", "data.patch_size=[32,32]", "data.radius=[3,8]", "data.num_objects=3",
    "data.num_train=8", "data.num_val=2", "data.batch_size=4",
]
TINY_3D = [
    "data=synthetic3d", "data.image_size=24", "data.patch_size=[16,16,16]", "data.radius=[3,6]",
    "data.num_objects=2", "data.num_train=2", "data.num_val=1", "data.batch_size=1",
]
TINY_MODEL = ["model.channels=[8,16]", "model.strides=[2]"]
TINY_TRAINER = [
    "trainer=cpu", "trainer.max_epochs=1", "trainer.check_val_every_n_epoch=1", "trainer.log_every_n_steps=1",
    "callbacks.step_timer.skip=0", "trainer.enable_model_summary=false", "callbacks.progress_bar.refresh_rate=0",
]


def weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}


class FitProbe(L.Callback):
    """What a fit in this process started from, how many training batches it ran and what a
    validation by itself scored. A run takes
    it with the override +callbacks.fit_probe._target_=helpers.training.FitProbe; every instance
    Hydra makes is in FitProbe.made."""

    made: list[FitProbe] = []

    def __init__(self):
        self.start_step: int | None = None
        self.start_state: dict[str, torch.Tensor] = {}
        self.validated_state: dict[str, torch.Tensor] = {}  # the weights a trainer.validate scored
        self.batches = 0
        FitProbe.made.append(self)

    def on_train_start(self, trainer, pl_module) -> None:  # after a resumed fit has restored its checkpoint
        self.start_step = trainer.global_step
        self.start_state = weights(pl_module)

    def on_validation_start(self, trainer, pl_module) -> None:
        if trainer.state.fn == TrainerFn.VALIDATING:
            self.validated_state = weights(pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.batches += 1


FIT_PROBE = "+callbacks.fit_probe._target_=helpers.training.FitProbe"


class BatchLog(L.Callback):
    """What one rank trained on, written to <folder>/rank<global rank>.json when its fit ends: the
    global step, and per training batch (after its transfer and device augmentation) the image's
    shape and sum and the draws' seeds. For processes of their own, which a test cannot probe; a
    run takes it with the overrides in batch_log(folder)."""

    def __init__(self, folder: str):
        self.folder = Path(folder)
        self.batches: list[dict] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.batches.append({"shape": list(batch["image"].shape), "sum": float(batch["image"].double().sum()),
                             "seeds": batch["seed"].tolist() if "seed" in batch else []})

    def on_train_end(self, trainer, pl_module) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        log = {"global_step": trainer.global_step, "batches": self.batches}
        (self.folder / f"rank{trainer.global_rank}.json").write_text(json.dumps(log))


def batch_log(folder: Path) -> list[str]:
    return ["+callbacks.batch_log._target_=helpers.training.BatchLog", f"+callbacks.batch_log.folder={folder}"]


def read_batch_logs(folder: Path) -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted(folder.glob("rank*.json"))]


def compose_config(overrides: list[str], output_dir: Path | None = None, name: str = "train",
                   with_hydra: bool = False) -> DictConfig:
    """conf/<name>.yaml (training's by default) with these overrides, as its command composes it;
    with_hydra: with the hydra node (the sweeper's and the sweep folder's settings) too."""
    register_resolvers()
    extra = [f"paths.output_dir={output_dir}"] if output_dir is not None else []
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name=name, overrides=overrides + extra, return_hydra_config=with_hydra)


def tiny_overrides(spatial_dims: int = 2) -> list[str]:
    return (TINY_2D if spatial_dims == 2 else TINY_3D) + TINY_MODEL + TINY_TRAINER


def write_tiny_task(folder: Path) -> Path:
    """The tiny Decathlon task the suite's shared models train on (tests/conftest.py): three
    cases on an oblique grid and one test image (imagesTs)."""
    return write_decathlon(folder / "Task", cases=3, affine=OBLIQUE_AFFINE, with_test=True)


def train_tiny_model(root: Path, run: Path, *overrides: str) -> None:
    """A tiny model trained on the Decathlon task at `root` (its fold 0 of 3) into the run folder `run`."""
    from segnet.training.train import train

    train(compose_config(["data=folder", f"data.root={root}", "data.num_folds=3", "data.num_workers=0", "op=cpp",
                          *overrides, *TINY_MODEL, *TINY_TRAINER], output_dir=run))


def run_train_script(args: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    """python train.py ARGS as the README runs it (flags such as -m first), its run folder under cwd."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HYDRA_FULL_ERROR": "0"}
    flags = [a for a in args if a.startswith("-")]
    overrides = [a for a in args if not a.startswith("-")]
    return subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *flags, f"hydra.run.dir={cwd}/run", f"hydra.sweep.dir={cwd}/multirun",
         *overrides],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
    )
