"""What a checkpoint carries so that a run resumed from it continues as the uninterrupted run
would have: the random-number generators' state, saved with every checkpoint so that the resumed
run draws what the uninterrupted one would have drawn, and a validation cut short by a stop run
again whole. (Writing checkpoints atomically: segnet.checkpoints.writing.)"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.trainer.states import TrainerFn


def rng_states() -> dict[str, Any]:
    """torch (CPU and CUDA), numpy and python generators, as tensors and plain lists (loadable
    weights-only)."""
    kind, keys, position, has_gauss, gauss = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": [kind, keys.tolist(), position, has_gauss, gauss],
        "python": [random.getstate()[0], list(random.getstate()[1]), random.getstate()[2]],
    }


def set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    if states["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    kind, keys, position, has_gauss, gauss = states["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), position, has_gauss, gauss))
    version, internal, gauss_next = states["python"]
    random.setstate((version, tuple(internal), gauss_next))


def validation_from_the_start(fit_loop: dict[str, Any]) -> None:
    """A checkpoint's fit-loop state (its "loops"/"fit_loop") as at the first batch of the
    validation in progress: Lightning resumes from one written after that first batch past the
    validation, as though done, and from this state runs it whole (its restart "mid
    evaluation"), as the run that never stopped did."""
    first_batch = {"ready": 1, "started": 1, "processed": 0, "completed": 0}
    fit_loop["epoch_loop.val_loop.batch_progress"] = {"total": dict(first_batch), "current": dict(first_batch),
                                                      "is_last_batch": False}


class ResumeState(L.Callback):
    """What Lightning's ModelCheckpoint for last.ckpt (conf/callbacks/default.yaml) lacks: the
    generators' state in every checkpoint, a validation cut short by a stop run again on resume,
    and the final state at the end of a fit whose `every_n_train_steps` saves (which replace its
    epoch-end saves) missed the last step. (The save at a stop: segnet.training.signals.)"""

    def __init__(self, last_path: str, every_n_train_steps: int | None = None):
        self.last_path = Path(last_path)
        self.every_n_train_steps = every_n_train_steps
        self.validating = False  # a validation of the fit has started and not yet ended

    def on_validation_start(self, trainer, pl_module) -> None:
        self.validating = trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking

    def on_validation_end(self, trainer, pl_module) -> None:
        self.validating = False  # before ModelCheckpoint's saves at this hook: Lightning calls those last

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        if self.validating:  # a stop, or SLURM's requeue signal, in the middle of a validation
            validation_from_the_start(checkpoint["loops"]["fit_loop"])

    def on_train_end(self, trainer, pl_module) -> None:
        every = self.every_n_train_steps
        if every and trainer.global_step % every and not trainer.fast_dev_run:
            trainer.save_checkpoint(self.last_path, weights_only=False)  # whole, to resume from

    def state_dict(self) -> dict[str, Any]:
        return {"rng": rng_states()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # Restored with the checkpoint, before the resumed fit creates its data iterators (which
        # draw the sampler's seed): the next epoch shuffles as it would have without the stop.
        if "rng" in state_dict:
            set_rng_states(state_dict["rng"])

